"""Snapshot tests of the terminal report at 80 columns, plus the formatting helpers it rests on.

Snapshots live in tests/report/snapshots/; `KSNIFF_UPDATE_SNAPSHOTS=1 pytest tests/report` rewrites them
(review the diff before committing).
"""

import dataclasses
import io

import pytest
from rich.console import Console

from ksniff.audit.model import Finding, FindingKind, ProducerSummary, Transaction
from ksniff.report import text as report_text
from ksniff.report import transactions
from ksniff.report.findings import ADVICE, findings_view
from ksniff.report.producers import producers_table
from ksniff.report.progress import progress
from ksniff.report.summary import header
from ksniff.report.terminal import render_report
from ksniff.report.timeline import producer_timeline
from ksniff.report.transactions import transactions_summary

WIDTH = 80


def render(renderable) -> str:
    console = Console(record=True, width=WIDTH, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def report(result, **kw) -> str:
    console = Console(record=True, width=WIDTH, color_system=None, file=io.StringIO())
    render_report(console, result, **kw)
    return console.export_text()


def assert_fits(text: str) -> None:
    too_wide = [line for line in text.splitlines() if len(line.rstrip()) > WIDTH]
    assert not too_wide, too_wide


@pytest.mark.parametrize(
    "name, build",
    [
        ("header", lambda r: header(r)),
        ("producers", lambda r: producers_table(r.producers)),
        ("transactions", lambda r: transactions_summary(r.transactions, r.findings, r.capture.last_ts)),
        ("findings", lambda r: findings_view(r.findings)),
        ("timeline_orders_txn", lambda r: producer_timeline(r, "orders-txn")),
        ("timeline_pid_5002", lambda r: producer_timeline(r, "5002")),
    ],
)
def test_renderable_snapshots(result, snapshot, name, build):
    text = render(build(result))
    assert_fits(text)
    snapshot(name, text)


def test_full_report_snapshot(result, snapshot):
    text = report(result, producer="orders-txn")
    assert_fits(text)
    snapshot("report_full", text)


def test_quiet_report_is_findings_only(result, snapshot):
    text = report(result, quiet=True)
    assert "Producers" not in text and "ksniff" not in text and "CRITICAL (2)" in text
    snapshot("report_quiet", text)


def test_empty_report(empty, snapshot):
    text = report(empty)
    assert_fits(text)
    assert "No findings." in text and "nothing captured" in text
    snapshot("report_empty", text)


def test_findings_are_grouped_critical_first(result):
    text = render(findings_view(result.findings))
    positions = [text.index(f"{s} (") for s in ("CRITICAL", "WARNING", "INFO")]
    assert positions == sorted(positions)


def test_every_contract_kind_has_advice():
    assert {k.value for k in FindingKind} <= set(ADVICE)
    assert {"unanswered_request", "write_outside_transaction", "offset_commit_backwards"} <= set(ADVICE)


def test_advice_is_shown_once_per_kind_present(result):
    text = render(findings_view(result.findings))
    advice = text[text.index("What to do") :]
    assert advice.count("producer_fenced") == 1
    assert "offset_commit_backwards" not in advice


def test_unknown_kinds_and_severities_still_render():
    f = Finding("brand_new_kind", "notice", 1714564800.0, "something new", evidence={"x": 1})
    text = render(findings_view([f]))
    assert "NOTICE (1)" in text and "brand_new_kind" in text and "x 1" in text


def test_evidence_reads_error_codes_as_the_broker_answer(result):
    text = render(findings_view(result.findings))
    flat = " ".join(text.split())
    assert "Produce v9 from 10.0.0.11:53422 (orders-app-1), broker answered INVALID_PRODUCER_EPOCH" in flat
    assert "broker answered DUPLICATE_SEQUENCE_NUMBER" in flat  # a bare error code, named
    assert "fenced_at 12:00:02.012" in flat  # epoch seconds shown as time of day
    assert "base_offset None" not in flat and "correlation_id" not in flat


def test_verbose_evidence_keeps_the_joining_keys(result):
    flat = " ".join(render(findings_view(result.findings, verbose=True)).split())
    assert "Produce v9 #7 from 10.0.0.11:53422" in flat and "conn 1" in flat


def test_wire_values_are_never_rich_markup(result):
    odd = ProducerSummary("[bold]txn[/bold]", 1, (0,), ("10.0.0.1:1",), ("[red]x",), 1, 1, 0, 0, 0, 0)
    text = render(producers_table([odd]))
    assert "[bold]txn[/bold]" in text and "[red]x" in text


def test_long_names_still_fit_in_80_columns(result):
    long_txn = "payments-settlement-service-eu-west-1-transactional-producer-instance-0042"
    result.producers.append(
        ProducerSummary(
            long_txn,
            9_999_999_999,
            tuple(range(40)),
            tuple(f"10.1.2.{i}:5{i:04d}" for i in range(9)),
            ("a-very-long-client-id-for-a-producer",),
            123_456,
            9_876_543,
            1000,
            2,
            3,
            4,
        )
    )
    result.transactions.append(
        Transaction(
            long_txn,
            9_999_999_999,
            7,
            result.transactions[0].start_ts,
            None,
            "open",
            tuple(f"{long_txn}-topic-{i}" for i in range(5)),
            12,
            (),
        )
    )
    result.findings.append(
        Finding(
            "sequence_gap",
            "critical",
            result.findings[0].ts,
            "x " * 80,
            transactional_id=long_txn,
            topic=long_txn,
            partition=11,
            evidence={"expected": 1, "base_sequence": 9},
        )
    )
    assert_fits(report(result, verbose=True, producer=long_txn))


def test_timeline_by_producer_id_includes_its_transactional_requests(result):
    text = render(producer_timeline(result, "4001"))
    assert "InitProducerId" in text and "EndTxn" in text and "orders-1" in text
    assert "payments" not in text


def test_timeline_outcomes_wrap_rather_than_being_cut(result):
    text = render(producer_timeline(result, "5002"))
    assert "DUPLICATE_SEQUENCE_NUMBER" in text and "(unverified)" in text


def test_timeline_of_an_unknown_producer_says_so(result):
    text = render(producer_timeline(result, "no-such-txn"))
    assert "No producer matches 'no-such-txn'" in text


def test_timeline_limit(result):
    text = render(producer_timeline(result, "payments-txn", limit=5))
    assert "... and 15 rows more" in text


def test_verbose_shows_every_finding(result):
    last = result.findings[-1]
    many = [dataclasses.replace(last, ts=last.ts + i, producer_id=7000 + i) for i in range(30)]
    terse = render(findings_view(many))
    assert "more (--verbose or --json)" in terse
    assert "more" not in render(findings_view(many, verbose=True)).split("What to do")[0]


def test_a_storm_of_repeats_is_one_finding_with_its_count_and_times(result):
    """A zombie retrying EndTxn: the same kind, producer and broker answer, 49 times, is one block."""
    fenced = next(f for f in result.findings if f.kind == "producer_fenced" and f.severity == "warning")
    storm = [dataclasses.replace(fenced, ts=fenced.ts + i * 0.5) for i in range(49)]
    text = render(findings_view(storm))
    assert text.count("producer_fenced orders-txn") == 1
    assert "WARNING (49 in 1 group)" in text
    assert f"49 times, {report_text.clock(storm[0].ts)} to {report_text.clock(storm[-1].ts)}" in text


@pytest.mark.parametrize(
    "seconds, text", [(0.0123, "12 ms"), (1.5, "1.50 s"), (65, "1m 05s"), (7322, "2h 02m")]
)
def test_duration(seconds, text):
    assert report_text.duration(seconds) == text


def test_clock_span_and_ranges():
    assert report_text.clock(1714564800.1234) == "12:00:00.123"
    assert report_text.span(1714607999.0, 1714608001.0) == (
        "2024-05-01 23:59:59.000 -> 2024-05-02 00:00:01.000 UTC (2.00 s)"
    )
    assert report_text.ranges([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert transactions.percentile(values, 50) == 50 and transactions.percentile(values, 95) == 95
    assert transactions.percentile([3.0], 95) == 3.0


def test_progress_is_silent_off_a_terminal():
    out = io.StringIO()
    with progress(Console(file=out, force_terminal=False), 1000) as bar:
        bar.update(500)
        bar.update(1000, 1000)
    assert out.getvalue() == ""


def test_progress_on_a_terminal_shows_bytes_of_bytes():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=WIDTH, color_system=None)
    bar = progress(console, 0)  # the total may only be known later
    bar.update(2_000_000, 4_000_000)
    bar._progress.refresh()
    bar.close()
    assert "2.0/4.0 MB" in out.getvalue()
