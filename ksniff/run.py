"""Wires the rooms for the CLI: inputs -> engine -> terminal report and exports -> exit code."""

from __future__ import annotations

import os
import sys

from rich.console import Console

from ksniff.options import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNVERIFIED, Options, abort
from ksniff.result import AuditResult


class _Console(Console):
    """rich's console, except for a pipe closed by its reader (`| head -1`), where rich would exit 1 on its
    own, which a script reads as "findings" whatever --exit-zero says. The report's console raises
    BrokenPipeError to `_to_stream`; the diagnostics' console goes quiet and the run goes on."""

    def __init__(self, *args, raise_broken_pipe: bool = True, **kw) -> None:
        super().__init__(*args, **kw)
        self._raise_broken_pipe = raise_broken_pipe

    def on_broken_pipe(self) -> None:
        self.quiet = True
        if self._raise_broken_pipe:
            raise BrokenPipeError
        _detach(self.file)


def _consoles(opts: Options) -> tuple[Console, Console]:
    """The report console (stdout, or stderr when stdout carries the JSON) and the diagnostics console."""
    no_color = not opts.color
    err = _Console(stderr=True, no_color=no_color, highlight=False, raise_broken_pipe=False)
    out = err if opts.json_path == "-" else _Console(no_color=no_color, highlight=False)
    return out, err


def exit_code(result: AuditResult, opts: Options) -> int:
    """0 clean, 1 findings (0 with --exit-zero), and with --strict 3 when there is no finding but the
    audit could not see or read everything (the JSON's summary.verdict "unverified")."""
    verdict = result.summary()["verdict"]
    if verdict == "findings":
        return EXIT_CLEAN if opts.exit_zero else EXIT_FINDINGS
    return EXIT_UNVERIFIED if verdict == "unverified" and opts.strict else EXIT_CLEAN


class _Tables:
    """Where the table rows go during a local or live run: the exports, written as rows come, and the
    `--producer` timeline's own rows. Leaving the block by an exception (`abort` exits by one too)
    removes the exports' temporary files."""

    def __init__(self, opts: Options) -> None:
        from ksniff.engine.local import RowFanout
        from ksniff.report.filters import FilteredRows

        # The exports' and the timeline's modules are loaded only when their option is given.
        self.export = self.producer = None
        if opts.producer:
            from ksniff.report.timeline import ProducerRows

            self.producer = ProducerRows(opts.producer)
        if opts.csv_dir or opts.parquet_dir:
            from ksniff.report.formats import ReportError
            from ksniff.report.stream import TableExport

            try:
                self.export = TableExport(
                    csv_dir=opts.csv_dir, parquet_dir=opts.parquet_dir, records=opts.records
                )
            except ReportError as e:
                abort(str(e))
        sinks = [s for s in (self.export, self.producer) if s is not None]
        self.sink = None if not sinks else sinks[0] if len(sinks) == 1 else RowFanout(*sinks)
        if self.sink is not None and opts.filters.active:
            self.sink = FilteredRows(self.sink, opts.filters)

    def __enter__(self) -> _Tables:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and self.export is not None:
            self.export.discard()
        return False

    def attach(self, result: AuditResult) -> None:
        """The result's rows are the timeline's (the exports already hold the rest)."""
        if self.producer is not None:
            result.exchanges = sorted(self.producer.exchanges, key=lambda r: r["ts"])
            result.batches = sorted(self.producer.batches, key=lambda r: r["ts"])


def _emit(
    result: AuditResult,
    opts: Options,
    out: Console,
    err: Console,
    tables: _Tables | None = None,
    written: bool = False,
) -> int:
    from ksniff.report.formats import STDOUT, ReportError, write_csv, write_html, write_json, write_parquet
    from ksniff.report.terminal import render_report
    from ksniff.report.text import shown_message

    result = opts.filters.apply(result)

    for warning in result.warnings:
        # One line per warning whatever the terminal's width, so scripts can grep them.
        err.print(f"ksniff: warning: {shown_message(warning)}", markup=False, highlight=False, soft_wrap=True)
    try:
        if opts.json_path == STDOUT:
            _to_stream(sys.stdout, lambda: write_json(result, STDOUT), "the JSON document")
        elif opts.json_path:
            write_json(result, opts.json_path)
        if tables is not None and tables.export is not None:
            tables.export.finish(result)  # written during the run: the last tables, then the renames
        elif not written:
            if opts.csv_dir:
                write_csv(result, opts.csv_dir)
            if opts.parquet_dir:
                write_parquet(result, opts.parquet_dir)
        if opts.html_path:
            write_html(result, opts.html_path)
    except ReportError as e:
        abort(str(e))
    whole = not opts.producer or opts.full_report  # -P alone: its timeline, not the report above it
    _to_stream(
        out.file,
        lambda: render_report(
            out,
            result,
            quiet=opts.quiet,
            verbose=opts.verbose,
            producer=opts.producer,
            report=whole,
            topic_partition=opts.topic_partition,
        ),
        "the report",
    )
    return exit_code(result, opts)


def _to_stream(stream, write, what: str) -> None:
    """Runs `write` to a standard stream. A pipe closed by its reader (`| head -1`) just ends the output:
    the run's exit code stays what the audit says. Any other failure (a full disk, an I/O error) is a
    run that could not be done: one line, exit 2. Either way the stream is pointed at /dev/null, so the
    interpreter's own flush at exit cannot fail again with a traceback."""
    try:
        write()
        stream.flush()
    except BrokenPipeError:
        _detach(stream)
    except OSError as err:
        _detach(stream)
        name = "standard error" if stream is sys.stderr else "standard output"
        abort(f"cannot write {what} to {name}: {err.strerror or err.__class__.__name__}")


def _detach(stream) -> None:
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def run_audit(
    captures: tuple[str, ...],
    opts: Options,
    *,
    engine: str,
    master: str | None,
    conf: tuple[tuple[str, str], ...] = (),
) -> int:
    from ksniff.capture import CaptureError
    from ksniff.common.paths import is_uri
    from ksniff.report.formats import ReportError

    out, err = _consoles(opts)
    config = opts.config
    if engine == "spark":  # the executors write the exports; the summary comes back for the report
        try:
            from ksniff.engine.spark import SparkUnavailable, run_spark

            try:
                result = run_spark(
                    captures,
                    config,
                    master=master,
                    conf=conf,
                    csv_dir=opts.csv_dir,
                    parquet_dir=opts.parquet_dir,
                    partition_by=opts.partition_by,
                    producer=opts.producer,
                    keep=opts.filters,
                    notice=None if opts.quiet else lambda text: _note(err, text),
                    # The terminal report alone reads only the digest of the findings and transactions;
                    # the JSON document, the HTML page, --verbose and the timeline and partition views
                    # read every one.
                    whole=bool(
                        opts.json_path
                        or opts.html_path
                        or opts.verbose
                        or opts.producer
                        or opts.topic_partition
                    ),
                )
            except SparkUnavailable as e:
                abort(str(e))
        except (CaptureError, ReportError) as e:
            abort(str(e))
        except KeyboardInterrupt:
            abort("interrupted", 130)
        _say_where_kafka_is(result, opts)
        return _emit(result, opts, out, err, written=True)
    for given in (opts.csv_dir, opts.parquet_dir, *captures):
        if given and is_uri(given):
            abort(
                f"{given}: a URI needs the Spark engine (--engine spark); the local engine reads and "
                "writes local paths"
            )
    from ksniff.engine.local import audit_paths

    with _Tables(opts) as tables:
        try:
            bar = None
            if err.is_terminal and not opts.quiet:
                from ksniff.report.progress import progress  # rich's progress bar: only when one is shown

                bar = progress(err, 0)
            try:
                result = audit_paths(
                    captures,
                    config,
                    tables=tables.sink,
                    progress=(lambda done, total: bar.update(done, total)) if bar else None,
                )
            finally:
                if bar is not None:
                    bar.close()
        except (CaptureError, ReportError) as e:
            abort(str(e))
        except KeyboardInterrupt:
            abort("interrupted", 130)
        tables.attach(result)
        _say_where_kafka_is(result, opts)
        return _emit(result, opts, out, err, tables)


def _note(err, text: str) -> None:
    """One line of what ksniff is doing apart from the audit, on the diagnostics console."""
    from ksniff.report.text import shown_message

    err.print(f"ksniff: {shown_message(text)}", markup=False, highlight=False, soft_wrap=True)


def _say_where_kafka_is(result: AuditResult, opts: Options) -> None:
    """A wrong --port is not an all-clear: when other ports' connections looked like Kafka (their first
    request and response, the decoder's watch), say which and what to run instead; when the named ports
    saw no Kafka and nothing else looked like it either, say that nothing was audited."""
    if not opts.ports_explicit or not result.capture.connections:
        return
    from ksniff.report.text import size

    named = ",".join(map(str, opts.ports))
    elsewhere = [r for r in result.kafka_elsewhere() if r["port"] not in opts.ports]
    if not elsewhere:
        if not result.capture.kafka_connections:
            result.warnings.append(
                f"no Kafka traffic on port {named}, nor on any other port: nothing was audited"
            )
        return
    seen = ", ".join(
        f"{r['port']} ({r['connections']:,} connection{'' if r['connections'] == 1 else 's'}"
        f", {size(r['bytes'])})"
        for r in elsewhere[:5]
    )
    more = f" and {len(elsewhere) - 5} more" if len(elsewhere) > 5 else ""
    hint = ",".join(str(r["port"]) for r in elsewhere[:5])
    if result.capture.kafka_connections:
        result.warnings.append(
            "traffic that looks like Kafka on other ports was not audited: port "
            f"{seen}{more}; to audit it too, run again with -p {named},{hint}"
        )
    else:
        result.warnings.append(
            f"no Kafka traffic on port {named}: nothing was audited; Kafka was seen "
            f"on port {seen}{more}: run again with -p {hint}"
        )


def run_live(iface: str, opts: Options, *, duration, count, write_path, bpf) -> int:
    from ksniff.capture import CaptureError
    from ksniff.engine.live import live_audit
    from ksniff.report.formats import ReportError

    out, err = _consoles(opts)
    config = opts.config
    with _Tables(opts) as tables:
        try:
            result = live_audit(
                iface,
                config,
                console=err,
                duration=duration,
                count=count,
                write_path=write_path,
                bpf=bpf,
                quiet=opts.quiet,
                explicit_ports=opts.ports_explicit,
                tables=tables.sink,
            )
        except (CaptureError, ReportError) as e:
            abort(str(e))
        except KeyboardInterrupt:  # a second Ctrl-C: the user wants out now, without the final report
            abort("interrupted", 130)
        tables.attach(result)
        return _emit(result, opts, out, err, tables)
