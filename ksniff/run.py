"""Wires the rooms for the CLI: inputs -> engine -> terminal report and exports -> exit code."""

from __future__ import annotations

from rich.console import Console

from ksniff.cli import EXIT_CLEAN, EXIT_FINDINGS, Options, abort
from ksniff.result import AuditResult


def _consoles(opts: Options) -> tuple[Console, Console]:
    """The report console (stdout, or stderr when stdout carries the JSON) and the diagnostics console."""
    no_color = not opts.color
    err = Console(stderr=True, no_color=no_color, highlight=False)
    out = err if opts.json_path == "-" else Console(no_color=no_color, highlight=False)
    return out, err


def _engine_config(opts: Options):
    from dataclasses import replace

    from ksniff.capture import CaptureLimits
    from ksniff.engine.local import EngineConfig

    keep_tables = bool(opts.csv_dir or opts.parquet_dir or opts.producer)
    lim = opts.limits
    caps = {name: value for name, value in (("max_connections", lim.max_connections),
                                            ("ooo_bytes_per_direction", lim.max_buffer_bytes),
                                            ("ooo_bytes_total", lim.max_buffer_total)) if value is not None}
    config = EngineConfig(ports=opts.ports, auto_detect=not opts.ports_explicit,
                          txn_timeout_ms=opts.txn_timeout_ms, keep_tables=keep_tables,
                          keep_records=opts.records, limits=CaptureLimits(**caps) if caps else None)
    if lim.max_frame_bytes is not None:
        config = replace(config, max_frame=lim.max_frame_bytes)
    if lim.max_in_flight is not None:
        config = replace(config, max_in_flight=lim.max_in_flight)
    return config


def exit_code(result: AuditResult, opts: Options) -> int:
    serious = any(f.severity in ("critical", "warning") for f in result.findings)
    return EXIT_FINDINGS if serious and not opts.exit_zero else EXIT_CLEAN


def _emit(result: AuditResult, opts: Options, out: Console, err: Console) -> int:
    from ksniff.report.formats import ReportError, write_csv, write_json, write_parquet
    from ksniff.report.terminal import render_report

    for warning in result.warnings:
        # One line per warning whatever the terminal's width, so scripts can grep them.
        err.print(f"ksniff: warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    try:
        if opts.json_path:
            write_json(result, opts.json_path)
        if opts.csv_dir:
            write_csv(result, opts.csv_dir)
        if opts.parquet_dir:
            write_parquet(result, opts.parquet_dir)
    except ReportError as e:
        abort(str(e))
    render_report(out, result, quiet=opts.quiet, verbose=opts.verbose, producer=opts.producer)
    return exit_code(result, opts)


def run_audit(captures: tuple[str, ...], opts: Options, *, engine: str, master: str) -> int:
    from ksniff.capture import CaptureError

    out, err = _consoles(opts)
    config = _engine_config(opts)
    try:
        if engine == "spark":
            from ksniff.engine.spark import SparkUnavailable, audit_paths_spark

            try:
                result = audit_paths_spark(captures, config, master=master)
            except SparkUnavailable as e:
                abort(str(e))
        else:
            from ksniff.engine.local import audit_paths
            from ksniff.report.terminal import progress

            bar = progress(err, 0) if err.is_terminal and not opts.quiet else None
            try:
                result = audit_paths(captures, config,
                                     progress=(lambda done, total: bar.update(done, total)) if bar else None)
            finally:
                if bar is not None:
                    bar.close()
    except CaptureError as e:
        abort(str(e))
    except KeyboardInterrupt:
        abort("interrupted", 130)
    return _emit(result, opts, out, err)


def run_live(iface: str, opts: Options, *, duration, count, write_path, bpf) -> int:
    from ksniff.capture import CaptureError
    from ksniff.engine.live import live_audit

    out, err = _consoles(opts)
    config = _engine_config(opts)
    try:
        result = live_audit(iface, config, console=err, duration=duration, count=count,
                            write_path=write_path, bpf=bpf, quiet=opts.quiet,
                            explicit_ports=opts.ports_explicit)
    except CaptureError as e:
        abort(str(e))
    except KeyboardInterrupt:  # a second Ctrl-C: the user wants out now, without the final report
        abort("interrupted", 130)
    return _emit(result, opts, out, err)

