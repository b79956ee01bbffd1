"""The `ksniff` command line: `audit` over capture files, `live` on an interface (docs/contract.md).

Parses the command line into `Options` (ksniff.options) and hands them to ksniff.run."""

from __future__ import annotations

import os
import sys

import click

from ksniff import __version__
from ksniff.audit import AuditConfig
from ksniff.config import DEFAULT_PORTS, EngineConfig
from ksniff.options import Options, abort

_DEFAULT = EngineConfig()


def _parse_ports(values: tuple[str, ...]) -> tuple[int, ...]:
    ports: list[int] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit() or not 0 < int(part) < 65536:
                raise click.BadParameter(f"not a TCP port: {part!r}", param_hint="--port")
            ports.append(int(part))
    return tuple(dict.fromkeys(ports))


def limit_options(f):
    """Caps on what untrusted traffic can make ksniff hold; what a cap cuts is counted and reported."""
    count = click.IntRange(min=1)
    decorators = [
        click.option("--max-connections", type=count, metavar="N", envvar="KSNIFF_MAX_CONNECTIONS",
                     help="TCP connections tracked at once; beyond it the longest idle one is closed "
                          f"(default {_DEFAULT.max_connections}). "
                          "[env KSNIFF_MAX_CONNECTIONS]"),
        click.option("--max-buffer-bytes", type=count, metavar="BYTES", envvar="KSNIFF_MAX_BUFFER_BYTES",
                     help="Out-of-order bytes held per connection direction; beyond it the hole waited "
                          f"for becomes a gap (default {_DEFAULT.max_buffer_bytes}). "
                          "[env KSNIFF_MAX_BUFFER_BYTES]"),
        click.option("--max-buffer-total", type=count, metavar="BYTES", envvar="KSNIFF_MAX_BUFFER_TOTAL",
                     help="Out-of-order bytes held across all connections "
                          f"(default {_DEFAULT.max_buffer_total}). "
                          "[env KSNIFF_MAX_BUFFER_TOTAL]"),
        click.option("--max-frame-bytes", type=click.IntRange(min=64), metavar="BYTES",
                     envvar="KSNIFF_MAX_FRAME_BYTES",
                     help="Largest Kafka frame decoded; a larger size is skipped and the stream "
                          f"resynchronised (default {_DEFAULT.max_frame}, Kafka's socket.request.max.bytes). "
                          "[env KSNIFF_MAX_FRAME_BYTES]"),
        click.option("--max-in-flight", type=count, metavar="N", envvar="KSNIFF_MAX_IN_FLIGHT",
                     help="Requests awaiting a response per connection; beyond it the oldest is given "
                          f"up as unanswered (default {_DEFAULT.max_in_flight}). "
                          "[env KSNIFF_MAX_IN_FLIGHT]"),
    ]
    for decorator in reversed(decorators):
        f = decorator(f)
    return f


def common_options(f):
    decorators = [
        click.option("--port", "-p", "ports", multiple=True, envvar="KSNIFF_PORT",
                     help="Kafka broker ports, comma-separated, repeatable. "
                          f"Default: {DEFAULT_PORTS[0]} plus auto-detection of Kafka on any port. "
                          "[env KSNIFF_PORT]"),
        click.option("--json", "json_path", metavar="PATH", envvar="KSNIFF_JSON",
                     help="Write the whole result as one JSON document ('-' for stdout). [env KSNIFF_JSON]"),
        click.option("--csv", "csv_dir", metavar="DIR", envvar="KSNIFF_CSV",
                     help="Write the tables as CSV files into DIR. [env KSNIFF_CSV]"),
        click.option("--parquet", "parquet_dir", metavar="DIR", envvar="KSNIFF_PARQUET",
                     help="Write the tables as Parquet files into DIR. [env KSNIFF_PARQUET]"),
        click.option("--producer", "-P", metavar="ID", envvar="KSNIFF_PRODUCER",
                     help="Show the timeline of one producer (transactional id or producer id). "
                          "[env KSNIFF_PRODUCER]"),
        click.option("--txn-timeout", "txn_timeout_ms", metavar="MS", type=click.IntRange(min=1),
                     envvar="KSNIFF_TXN_TIMEOUT",
                     help="Hanging-transaction threshold in ms when the producer's own timeout was not "
                          f"seen (default {AuditConfig().txn_timeout_ms}). [env KSNIFF_TXN_TIMEOUT]"),
        click.option("--records", is_flag=True, envvar="KSNIFF_RECORDS",
                     help="Also decode and export record keys, values and headers (never by default). "
                          "[env KSNIFF_RECORDS]"),
        click.option("--exit-zero", is_flag=True, envvar="KSNIFF_EXIT_ZERO",
                     help="Exit 0 even when there are findings (still 2 on errors). [env KSNIFF_EXIT_ZERO]"),
        click.option("--quiet", "-q", is_flag=True, help="Print only the findings."),
        click.option("--verbose", "-v", is_flag=True, help="Print more detail and diagnostics."),
        click.option("--no-color", is_flag=True, envvar="NO_COLOR",
                     help="No colours (also when NO_COLOR is set or output is not a terminal)."),
    ]
    for decorator in reversed(decorators):
        f = decorator(f)
    return limit_options(f)


def make_options(kw: dict) -> Options:
    if kw["quiet"] and kw["verbose"]:
        raise click.UsageError("--quiet and --verbose exclude each other")
    no_color = kw["no_color"] or bool(os.environ.get("NO_COLOR"))
    ports = _parse_ports(kw["ports"])
    limits = {name: kw[option] for name, option in (
        ("max_connections", "max_connections"), ("max_buffer_bytes", "max_buffer_bytes"),
        ("max_buffer_total", "max_buffer_total"), ("max_frame", "max_frame_bytes"),
        ("max_in_flight", "max_in_flight")) if kw[option] is not None}
    config = EngineConfig(
        ports=ports or DEFAULT_PORTS,
        auto_detect=not ports,
        txn_timeout_ms=kw["txn_timeout_ms"],
        keep_tables=bool(kw["csv_dir"] or kw["parquet_dir"] or kw["producer"]),
        keep_records=kw["records"],
        **limits,
    )
    return Options(
        config=config,
        ports_explicit=bool(ports),
        json_path=kw["json_path"],
        csv_dir=kw["csv_dir"],
        parquet_dir=kw["parquet_dir"],
        producer=kw["producer"],
        exit_zero=kw["exit_zero"],
        quiet=kw["quiet"],
        verbose=kw["verbose"],
        color=not no_color,
    )


class KsniffGroup(click.Group):
    """click's group, but a usage error is one line on stderr and exit 2 (docs/contract.md), not a usage
    block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            where = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            abort(f"{e.format_message()}{where}")
        except click.ClickException as e:
            abort(e.format_message(), e.exit_code)
        except click.Abort:
            abort("interrupted", 130)
        sys.exit(code or 0)


@click.group(cls=KsniffGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ksniff")
def main() -> None:
    """Passive Apache Kafka protocol sniffer and transaction auditor.

    ksniff reads captured traffic between Kafka clients and brokers, reconstructs each producer's
    idempotent and transactional timeline, and flags sequence gaps, duplicates, epoch regressions,
    fencing, zombie writes and hanging transactions. It only listens.

    Exit codes: 0 no warning or critical finding, 1 findings, 2 could not run.
    """


@main.command()
@click.argument("captures", nargs=-1, required=True, metavar="CAPTURE...")
@common_options
@click.option("--engine", type=click.Choice(["local", "spark"]), default=None, envvar="KSNIFF_ENGINE",
              help="Run in-process (local, default) or as a PySpark job (spark). [env KSNIFF_ENGINE]")
@click.option("--master", metavar="URL", envvar="KSNIFF_MASTER",
              help="Spark master (default local[*]); implies --engine spark. [env KSNIFF_MASTER]")
def audit(captures: tuple[str, ...], engine: str | None, master: str | None, **kw) -> None:
    """Audit pcap/pcapng captures, or folders of them (recursively)."""
    opts = make_options(kw)
    if master and engine == "local":
        raise click.UsageError("--master needs --engine spark")
    engine = engine or ("spark" if master else "local")
    from ksniff.run import run_audit

    sys.exit(run_audit(captures, opts, engine=engine, master=master or "local[*]"))


@main.command()
@click.argument("iface", metavar="IFACE")
@common_options
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop after this many seconds.")
@click.option("--count", type=click.IntRange(min=1), metavar="PACKETS", help="Stop after this many packets.")
@click.option("--write", "write_path", metavar="PCAP", help="Also keep what was captured in a pcap file.")
@click.option("--filter", "bpf", metavar="BPF", help="A BPF filter, added to the port filter.")
def live(iface: str, duration: float | None, count: int | None, write_path: str | None, bpf: str | None,
         **kw) -> None:
    """Capture on interface IFACE and audit as traffic flows; Ctrl-C stops and reports."""
    opts = make_options(kw)
    from ksniff.run import run_live

    sys.exit(run_live(iface, opts, duration=duration, count=count, write_path=write_path, bpf=bpf))


if __name__ == "__main__":
    main()
