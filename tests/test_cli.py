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


def test_partition_by_is_checked_before_anything_runs():
    """--partition-by names columns of the Parquet folders, so it needs --parquet and the Spark engine;
    anything else is one line and exit 2, before a capture is read or Spark starts."""
    cases = {
        ("--partition-by", "date"): "--partition-by needs --parquet DIR",
        ("--partition-by", "day", "--parquet", "out"): "'day' is not one of date, cluster",
        ("--partition-by", ",", "--parquet", "out"): "no column named",
        ("--partition-by", "date", "--parquet", "out", "--engine", "local"): "need --engine spark",
    }
    for args, says in cases.items():
        result = CliRunner().invoke(main, ["audit", "x.pcap", *args])
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ksniff: error: "), result.stderr
        assert says in lines[0], (args, lines[0])
