"""The command line surface of docs/contract.md: every command and option is there and explains itself."""

from click.testing import CliRunner

from ksniff.cli import main

CONTRACT_OPTIONS = [
    "--port",
    "--json",
    "--csv",
    "--parquet",
    "--producer",
    "--txn-timeout",
    "--exit-zero",
    "--quiet",
    "--verbose",
    "--no-color",
]


def test_help_lists_both_commands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "audit" in result.output and "live" in result.output


def test_audit_help_has_contract_options():
    result = CliRunner().invoke(main, ["audit", "--help"])
    assert result.exit_code == 0
    for option in CONTRACT_OPTIONS + ["--engine", "--master"]:
        assert option in result.output


def test_live_help_has_contract_options():
    result = CliRunner().invoke(main, ["live", "--help"])
    assert result.exit_code == 0
    for option in CONTRACT_OPTIONS + ["--duration", "--count", "--write", "--filter"]:
        assert option in result.output


def test_bad_port_is_a_usage_error():
    result = CliRunner().invoke(main, ["audit", "x.pcap", "--port", "99999"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_usage_errors_are_one_line_on_stderr():
    for args in (["audit"], ["audit", "x.pcap", "--txn-timeout", "soon"], ["nope"], ["live"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ksniff: error: "), result.stderr
        assert result.stdout == ""
