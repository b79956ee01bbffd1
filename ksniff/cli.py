"""The `ksniff` command line: `audit` over capture files, `live` on an interface (docs/contract.md).

Parses the command line into `Options` (ksniff.options) and hands them to ksniff.run."""

from __future__ import annotations

import os
import sys

import click

from ksniff.audit import AuditConfig
from ksniff.common.version import VERSION as __version__
from ksniff.config import DEFAULT_PORTS, EngineConfig, parse_ports
from ksniff.options import Options, abort
from ksniff.report.filters import FilterError, ResultFilter, parse_time

_DEFAULT = EngineConfig()


def _parse_ports(values: tuple[str, ...]) -> tuple[int, ...]:
    try:
        return parse_ports(values)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--port") from None


def limit_options(f):
    """Caps on what untrusted traffic can make ksniff hold; what a cap cuts is counted and reported."""
    count = click.IntRange(min=1)
    decorators = [
        click.option(
            "--max-connections",
            type=count,
            metavar="N",
            envvar="KSNIFF_MAX_CONNECTIONS",
            help="TCP connections tracked at once; beyond it the longest idle one is closed "
            f"(default {_DEFAULT.max_connections}). "
            "[env KSNIFF_MAX_CONNECTIONS]",
        ),
        click.option(
            "--max-buffer-bytes",
            type=count,
            metavar="BYTES",
            envvar="KSNIFF_MAX_BUFFER_BYTES",
            help="Out-of-order bytes held per connection direction; beyond it the hole waited "
            f"for becomes a gap (default {_DEFAULT.max_buffer_bytes}). "
            "[env KSNIFF_MAX_BUFFER_BYTES]",
        ),
        click.option(
            "--max-buffer-total",
            type=count,
            metavar="BYTES",
            envvar="KSNIFF_MAX_BUFFER_TOTAL",
            help="Out-of-order bytes held across all connections "
            f"(default {_DEFAULT.max_buffer_total}). "
            "[env KSNIFF_MAX_BUFFER_TOTAL]",
        ),
        click.option(
            "--max-frame-bytes",
            type=click.IntRange(min=64),
            metavar="BYTES",
            envvar="KSNIFF_MAX_FRAME_BYTES",
            help="Largest Kafka frame decoded; a larger size is skipped and the stream "
            f"resynchronised (default {_DEFAULT.max_frame}, Kafka's socket.request.max.bytes). "
            "[env KSNIFF_MAX_FRAME_BYTES]",
        ),
        click.option(
            "--max-in-flight",
            type=count,
            metavar="N",
            envvar="KSNIFF_MAX_IN_FLIGHT",
            help="Requests awaiting a response per connection; beyond it the oldest is given "
            f"up as unanswered (default {_DEFAULT.max_in_flight}). "
            "[env KSNIFF_MAX_IN_FLIGHT]",
        ),
        click.option(
            "--max-in-flight-total",
            type=count,
            metavar="N",
            envvar="KSNIFF_MAX_IN_FLIGHT_TOTAL",
            help="Requests awaiting a response across all connections; beyond it the oldest of "
            "the connection holding most is given up as unanswered "
            f"(default {_DEFAULT.max_in_flight_total}). [env KSNIFF_MAX_IN_FLIGHT_TOTAL]",
        ),
        click.option(
            "--max-partial-total",
            type=count,
            metavar="BYTES",
            envvar="KSNIFF_MAX_PARTIAL_TOTAL",
            help="Bytes of Kafka frames waiting for their end, across all connections; beyond "
            "it the largest is given up and its stream resynchronised "
            f"(default {_DEFAULT.max_partial_total}). [env KSNIFF_MAX_PARTIAL_TOTAL]",
        ),
        click.option(
            "--max-body-items",
            type=count,
            metavar="N",
            envvar="KSNIFF_MAX_BODY_ITEMS",
            help="Array elements and record batches one request or response body may hold; a "
            f"body with more is not decoded (default {_DEFAULT.max_body_items}). "
            "[env KSNIFF_MAX_BODY_ITEMS]",
        ),
        click.option(
            "--max-records-batch",
            type=count,
            metavar="BYTES",
            envvar="KSNIFF_MAX_RECORDS_BATCH",
            help="With --records: bytes one record batch may decompress to "
            f"(default {_DEFAULT.max_records_batch}). [env KSNIFF_MAX_RECORDS_BATCH]",
        ),
        click.option(
            "--max-records-request",
            type=count,
            metavar="BYTES",
            envvar="KSNIFF_MAX_RECORDS_REQUEST",
            help="With --records: bytes the batches of one Produce request may decompress to "
            f"(default {_DEFAULT.max_records_request}). [env KSNIFF_MAX_RECORDS_REQUEST]",
        ),
        click.option(
            "--max-records-total",
            type=count,
            metavar="BYTES",
            envvar="KSNIFF_MAX_RECORDS_TOTAL",
            help="With --records: bytes all batches of the run may decompress to "
            f"(default {_DEFAULT.max_records_run}). [env KSNIFF_MAX_RECORDS_TOTAL]",
        ),
        click.option(
            "--max-interfaces",
            type=count,
            metavar="N",
            envvar="KSNIFF_MAX_INTERFACES",
            help="pcapng interfaces kept per section; packets of later ones are skipped "
            f"(default {_DEFAULT.max_interfaces}). [env KSNIFF_MAX_INTERFACES]",
        ),
        click.option(
            "--max-gunzip-ratio",
            type=count,
            metavar="N",
            envvar="KSNIFF_MAX_GUNZIP_RATIO",
            help="A .gz capture is read up to N times its size (at least 256 MiB); the rest "
            f"is not read (default {_DEFAULT.max_gunzip_ratio}). "
            "[env KSNIFF_MAX_GUNZIP_RATIO]",
        ),
    ]
    for decorator in reversed(decorators):
        f = decorator(f)
    return f


def common_options(f):
    decorators = [
        click.option(
            "--port",
            "-p",
            "ports",
            multiple=True,
            envvar="KSNIFF_PORT",
            help="Kafka broker ports, comma-separated, repeatable. "
            f"Default: {DEFAULT_PORTS[0]} plus auto-detection of Kafka on any port. "
            "[env KSNIFF_PORT]",
        ),
        click.option(
            "--json",
            "json_path",
            metavar="PATH",
            envvar="KSNIFF_JSON",
            help="Write the whole result as one JSON document ('-' for stdout). [env KSNIFF_JSON]",
        ),
        click.option(
            "--csv",
            "csv_dir",
            metavar="DIR",
            envvar="KSNIFF_CSV",
            help="Write the tables as CSV files into DIR. [env KSNIFF_CSV]",
        ),
        click.option(
            "--parquet",
            "parquet_dir",
            metavar="DIR",
            envvar="KSNIFF_PARQUET",
            help="Write the tables as Parquet files into DIR. [env KSNIFF_PARQUET]",
        ),
        click.option(
            "--html",
            "html_path",
            metavar="FILE",
            envvar="KSNIFF_HTML",
            help="Write one self-contained HTML report (timelines per transactional id, "
            "findings with their evidence), readable offline. [env KSNIFF_HTML]",
        ),
        click.option(
            "--producer",
            "-P",
            metavar="ID",
            envvar="KSNIFF_PRODUCER",
            help="Show every step of one producer (transactional id or producer id) instead of "
            "the report; with --report, after it. [env KSNIFF_PRODUCER]",
        ),
        click.option(
            "--topic-partition",
            "-T",
            "topic_partition",
            metavar="TOPIC-N",
            envvar="KSNIFF_TOPIC_PARTITION",
            help="Show one partition's log as the wire showed it: who wrote which offsets, in "
            "which transaction and how it ended, who read it. [env KSNIFF_TOPIC_PARTITION]",
        ),
        click.option(
            "--report", "full_report", is_flag=True, help="With --producer: print the whole report too."
        ),
        click.option(
            "--severity",
            type=click.Choice(["info", "warning", "critical"]),
            metavar="LEVEL",
            envvar="KSNIFF_SEVERITY",
            help="Keep findings of this severity or worse: info, warning or critical. [env KSNIFF_SEVERITY]",
        ),
        click.option(
            "--kind",
            "kinds",
            multiple=True,
            metavar="KIND",
            envvar="KSNIFF_KIND",
            help="Keep findings of these kinds (comma-separated, repeatable). [env KSNIFF_KIND]",
        ),
        click.option(
            "--since",
            metavar="TIME",
            envvar="KSNIFF_SINCE",
            help="Keep what happened from this capture time on: ISO-8601 (UTC unless it says) "
            "or epoch seconds. [env KSNIFF_SINCE]",
        ),
        click.option(
            "--until",
            metavar="TIME",
            envvar="KSNIFF_UNTIL",
            help="Keep what happened up to this capture time. [env KSNIFF_UNTIL]",
        ),
        click.option(
            "--transactional-id",
            "-t",
            "transactional_ids",
            multiple=True,
            metavar="ID",
            envvar="KSNIFF_TRANSACTIONAL_ID",
            help="Keep only these transactional ids (repeatable). [env KSNIFF_TRANSACTIONAL_ID]",
        ),
        click.option(
            "--strict",
            is_flag=True,
            envvar="KSNIFF_STRICT",
            help="Exit 3 when there is no finding but the audit could not see or read everything "
            "(no Kafka traffic, capture gaps, drops, decode errors). [env KSNIFF_STRICT]",
        ),
        click.option(
            "--txn-timeout",
            "txn_timeout_ms",
            metavar="MS",
            type=click.IntRange(min=1),
            envvar="KSNIFF_TXN_TIMEOUT",
            help="Hanging-transaction threshold in ms when the producer's own timeout was not "
            f"seen (default {AuditConfig().txn_timeout_ms}). [env KSNIFF_TXN_TIMEOUT]",
        ),
        click.option(
            "--records",
            is_flag=True,
            envvar="KSNIFF_RECORDS",
            help="Also decode and export record keys, values and headers (never by default). "
            "[env KSNIFF_RECORDS]",
        ),
        click.option(
            "--exit-zero",
            is_flag=True,
            envvar="KSNIFF_EXIT_ZERO",
            help="Exit 0 even when there are findings (still 2 on errors). [env KSNIFF_EXIT_ZERO]",
        ),
        click.option("--quiet", "-q", is_flag=True, help="Print only the findings."),
        click.option("--verbose", "-v", is_flag=True, help="Print more detail and diagnostics."),
        click.option(
            "--no-color",
            is_flag=True,
            envvar="NO_COLOR",
            help="No colours (also when NO_COLOR is set or output is not a terminal).",
        ),
    ]
    for decorator in reversed(decorators):
        f = decorator(f)
    return limit_options(f)


def _filters(kw: dict) -> ResultFilter:
    kinds = frozenset(k.strip() for value in kw["kinds"] for k in value.split(",") if k.strip())
    try:
        since = parse_time(kw["since"]) if kw["since"] else None
        until = parse_time(kw["until"]) if kw["until"] else None
    except FilterError as e:
        raise click.BadParameter(str(e), param_hint="--since/--until") from None
    if since is not None and until is not None and until < since:
        raise click.BadParameter("--until is before --since", param_hint="--until")
    return ResultFilter(
        severity=kw["severity"],
        kinds=kinds,
        since=since,
        until=until,
        transactional_ids=frozenset(kw["transactional_ids"]),
    )


def make_options(kw: dict) -> Options:
    if kw["quiet"] and kw["verbose"]:
        raise click.UsageError("--quiet and --verbose exclude each other")
    if kw["full_report"] and not kw["producer"]:
        raise click.UsageError("--report goes with --producer (without it the report is printed anyway)")
    no_color = kw["no_color"] or bool(os.environ.get("NO_COLOR"))
    ports = _parse_ports(kw["ports"])
    limits = {
        name: kw[option]
        for name, option in (
            ("max_connections", "max_connections"),
            ("max_buffer_bytes", "max_buffer_bytes"),
            ("max_buffer_total", "max_buffer_total"),
            ("max_frame", "max_frame_bytes"),
            ("max_in_flight", "max_in_flight"),
            ("max_in_flight_total", "max_in_flight_total"),
            ("max_partial_total", "max_partial_total"),
            ("max_body_items", "max_body_items"),
            ("max_records_batch", "max_records_batch"),
            ("max_records_request", "max_records_request"),
            ("max_records_run", "max_records_total"),
            ("max_interfaces", "max_interfaces"),
            ("max_gunzip_ratio", "max_gunzip_ratio"),
        )
        if kw[option] is not None
    }
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
        html_path=kw["html_path"],
        full_report=kw["full_report"],
        topic_partition=kw["topic_partition"],
        filters=_filters(kw),
        strict=kw["strict"],
    )


# `--help` in the order a responder reads it: where results go, what to show, how the run goes, and the
# memory caps last. Options not named here (--help) come at the end.
HELP_SECTIONS = {
    "Outputs": (
        "json_path",
        "csv_dir",
        "parquet_dir",
        "partition_by",
        "html_path",
        "producer",
        "topic_partition",
        "full_report",
        "quiet",
        "verbose",
        "no_color",
    ),
    "Filters (report and exports alike)": ("severity", "kinds", "since", "until", "transactional_ids"),
    "The run": (
        "ports",
        "txn_timeout_ms",
        "records",
        "exit_zero",
        "strict",
        "engine",
        "master",
        "duration",
        "count",
        "write_path",
        "bpf",
    ),
    "Limits (caps on what untrusted traffic can make ksniff hold)": (
        "max_connections",
        "max_buffer_bytes",
        "max_buffer_total",
        "max_frame_bytes",
        "max_in_flight",
    ),
}


class SectionedCommand(click.Command):
    """A command whose --help lists its options by section (HELP_SECTIONS), then its examples."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {
            p.name: p.get_help_record(ctx) for p in self.get_params(ctx) if isinstance(p, click.Option)
        }
        records = {name: rec for name, rec in records.items() if rec is not None}
        for title, names in HELP_SECTIONS.items():
            rows = [records.pop(n) for n in names if n in records]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        if records:
            with formatter.section("Other"):
                formatter.write_dl(list(records.values()))


AUDIT_EXAMPLES = """Examples:

\b
  ksniff audit incident.pcap                       the report: stories, findings, advice
  ksniff audit captures/ --html incident.html      one page to share, readable offline
  ksniff audit incident.pcap -P orders-txn         every step of one transactional id
  ksniff audit incident.pcap --severity warning --since 2026-11-21T08:00:00Z
  ksniff audit incident.pcap --json - --strict | jq .summary   clean, findings or unverified
  ksniff audit broker.pcap -p 19093 --csv out/     a broker on another port; tables for a notebook
"""

LIVE_EXAMPLES = """Examples:

\b
  ksniff live eth0 -p 9092 --duration 60 --write incident.pcap
  ksniff live lo -P orders-txn --html live.html
"""


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


@click.group(
    cls=KsniffGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, prog_name="ksniff")
def main() -> None:
    """Passive Apache Kafka protocol sniffer and transaction auditor.

    ksniff reads captured traffic between Kafka clients and brokers, reconstructs each producer's
    idempotent and transactional timeline, and flags sequence gaps, duplicates, epoch regressions,
    fencing, zombie writes and hanging transactions. It only listens.

    Exit codes: 0 no warning or critical finding, 1 findings, 2 could not run; with --strict, 3 when
    there is no finding but the audit could not see or read everything.
    """


@main.command(cls=SectionedCommand, epilog=AUDIT_EXAMPLES)
@click.argument("captures", nargs=-1, required=True, metavar="CAPTURE...")
@common_options
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default=None,
    envvar="KSNIFF_ENGINE",
    help="Run in-process (local, default) or as a PySpark job (spark). [env KSNIFF_ENGINE]",
)
@click.option(
    "--master",
    metavar="URL",
    envvar="KSNIFF_MASTER",
    help="Spark master; implies --engine spark. Default: what spark-submit or Spark's "
    "configuration says, else local[*]. [env KSNIFF_MASTER]",
)
@click.option(
    "--conf",
    "spark_conf",
    metavar="KEY=VALUE",
    multiple=True,
    help="A Spark configuration property, as spark-submit's --conf; repeatable; implies --engine spark.",
)
@click.option(
    "--partition-by",
    "partition_by",
    metavar="date,cluster",
    envvar="KSNIFF_PARTITION_BY",
    help="With --parquet: write each table as a Parquet folder partitioned by the UTC date of its rows "
    "and/or the cluster they came from (DIR/TABLE.parquet/date=.../cluster=.../), replacing only the "
    "partitions this run writes, for a lake that collects many runs; implies --engine spark. "
    "[env KSNIFF_PARTITION_BY]",
)
@click.option(
    "--merge",
    is_flag=True,
    envvar="KSNIFF_MERGE",
    help="Audit every input as one capture set (one producer-id space), whatever they share. "
    "[env KSNIFF_MERGE]",
)
@click.option(
    "--separate",
    is_flag=True,
    envvar="KSNIFF_SEPARATE",
    help="Audit every input file as its own capture set. Default: files that share a cluster "
    "while they ran, or a TCP connection, are one set. [env KSNIFF_SEPARATE]",
)
def audit(
    captures: tuple[str, ...],
    engine: str | None,
    master: str | None,
    spark_conf: tuple[str, ...],
    partition_by: str | None,
    merge: bool,
    separate: bool,
    **kw,
) -> None:
    """Audit pcap/pcapng captures, or folders of them (recursively); with --engine spark also Hadoop
    file system URIs (file://, hdfs://, s3a://, ...)."""
    from dataclasses import replace

    if merge and separate:
        raise click.UsageError("--merge and --separate exclude each other")
    opts = make_options(kw)
    mode = "merge" if merge else "separate" if separate else "auto"
    opts = replace(opts, config=replace(opts.config, capture_sets=mode))
    if (master or spark_conf or partition_by) and engine == "local":
        raise click.UsageError("--master, --conf and --partition-by need --engine spark")
    partitions = _partition_columns(partition_by, kw["parquet_dir"])
    pairs = []
    for pair in spark_conf:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"not key=value: {pair!r}", param_hint="--conf")
        pairs.append((key.strip(), value))
    engine = engine or ("spark" if master or pairs or partitions else "local")
    opts = replace(opts, partition_by=partitions)
    from ksniff.run import run_audit

    sys.exit(run_audit(captures, opts, engine=engine, master=master, conf=tuple(pairs)))


PARTITION_COLUMNS = ("date", "cluster")


def _partition_columns(given: str | None, parquet_dir: str | None) -> tuple[str, ...]:
    """--partition-by's columns, in the order given (the folder nesting), each once."""
    if not given:
        return ()
    columns = [c.strip() for c in given.split(",") if c.strip()]
    for c in columns:
        if c not in PARTITION_COLUMNS:
            raise click.BadParameter(
                f"{c!r} is not one of {', '.join(PARTITION_COLUMNS)}", param_hint="--partition-by"
            )
    if not columns:
        raise click.BadParameter("no column named", param_hint="--partition-by")
    if not parquet_dir:
        raise click.UsageError("--partition-by needs --parquet DIR")
    return tuple(dict.fromkeys(columns))


@main.command(cls=SectionedCommand, epilog=LIVE_EXAMPLES)
@click.argument("iface", metavar="IFACE")
@common_options
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Stop after this many seconds.",
)
@click.option("--count", type=click.IntRange(min=1), metavar="PACKETS", help="Stop after this many packets.")
@click.option("--write", "write_path", metavar="PCAP", help="Also keep what was captured in a pcap file.")
@click.option("--filter", "bpf", metavar="BPF", help="A BPF filter, added to the port filter.")
def live(
    iface: str, duration: float | None, count: int | None, write_path: str | None, bpf: str | None, **kw
) -> None:
    """Capture on interface IFACE and audit as traffic flows; Ctrl-C stops and reports."""
    opts = make_options(kw)
    from ksniff.run import run_live

    sys.exit(run_live(iface, opts, duration=duration, count=count, write_path=write_path, bpf=bpf))


def program() -> None:
    """The `ksniff` program itself (its console script, `python -m ksniff.cli`): `main`, then the end of
    the process without the interpreter's teardown when nothing can be lost by it.

    Python's own ending takes every module and object apart one by one and collects garbage three times:
    a tenth of the instructions of an audit of nothing (bench/README.md, "Start-up"), for a process about
    to be gone. What that ending does that matters is flushing what is still buffered: exit handlers run
    and the standard streams are flushed here as there, and the quick end is taken only when every file
    the run opened for writing is closed (the descriptors open for writing at the end are those open at
    its start: a writer still open holds one). Otherwise (a writer left open, another thread still
    running, a stream that will not flush, an exit status that is a message, a system without
    /proc/self/fd), the normal end does it all. The capture files' page worker
    (ksniff.capture.readahead) is not such a thread: it only advises the kernel on the pages of files
    read, and nothing is lost with it. A program that calls `main` itself (the tests, a notebook) keeps
    the normal end."""
    from ksniff.common import ending

    before = _writable_descriptors()
    if before is not None:
        ending.arm()  # the run's state is left to the end of the process (ksniff.common.ending)
    quick = False
    try:
        try:
            main()
            code = 0
        except SystemExit as end:
            code = end.code
            if code is not None and not isinstance(code, int):
                raise
        threading = sys.modules.get("threading")
        pages = sys.modules.get("ksniff.capture.readahead")
        others = 1 + (pages.threads() if pages is not None else 0)  # this one, and the page worker
        if before is None or (threading is not None and threading.active_count() > others):
            sys.exit(code)
        import atexit

        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            sys.exit(code)
        after = _writable_descriptors()
        if after is None or not after <= before:
            sys.exit(code)
        quick = True
    finally:
        if not quick:  # every way out but the quick end below
            ending.normal_end()
    os._exit(code or 0)


def _writable_descriptors() -> frozenset[int] | None:
    """The process's file descriptors open for writing (Linux's /proc), or None where they cannot be
    listed."""
    import fcntl

    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    found = set()
    for name in names:
        try:
            flags = fcntl.fcntl(int(name), fcntl.F_GETFL)
        except (OSError, ValueError):
            continue  # the listing's own descriptor, closed by now
        if flags & os.O_ACCMODE != os.O_RDONLY:
            found.add(int(name))
    return frozenset(found)


if __name__ == "__main__":
    program()
