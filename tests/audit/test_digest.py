"""The digest of findings and transactions (ksniff.audit.digest) is what the terminal report reads: merged
from any split of a run's lists (per capture set, as the Spark driver merges one digest per set; or any
other, as it merges one per producer group), it renders the report of the whole lists, line for line."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from rich.console import Console

from ksniff.audit.digest import Digest
from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths
from ksniff.report.findings import findings_view
from ksniff.report.partitions import partitions_overview
from ksniff.report.producers import stories_table
from ksniff.report.transactions import SLOWEST_SHOWN, transactions_summary

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
CORPUS = sorted(str(p) for p in PCAPS.glob("*.pcap*") if p.stat().st_size > 24)


@pytest.fixture(scope="module")
def corpus():
    """The corpus audited as one run: its capture sets joined into one result."""
    result = audit_paths(CORPUS, EngineConfig())
    assert len(result.capture_sets) > 1
    assert sum(t.end_ts is not None for t in result.transactions) > SLOWEST_SHOWN
    assert any(t.outcome == "open" for t in result.transactions)
    assert len(result.findings) > len(Digest.of(result.findings, ()).findings.groups())  # repeats fold
    return result


def _text(renderable) -> str:
    console = Console(record=True, width=100, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _report(result, digest: Digest, verbose: bool = False) -> list[str]:
    read = [p for p in result.partitions if p.fetch_answers]
    return [
        _text(findings_view(digest.findings, verbose=verbose)),
        _text(transactions_summary(digest.transactions, digest.findings, result.capture.last_ts)),
        _text(stories_table(result.producers, digest, verbose=verbose)),
        _text(partitions_overview(read, digest.findings)),
    ]


def _split(result, part_of) -> Digest:
    """The digests of the parts `part_of` (finding or transaction -> part) puts each item in, each part's
    lists in the run's order, merged."""
    parts: dict[int, tuple[list, list]] = {}
    for f in result.findings:
        parts.setdefault(part_of(f), ([], []))[0].append(f)
    for t in result.transactions:
        parts.setdefault(part_of(t), ([], []))[1].append(t)
    return Digest.merge([Digest.of(f, t, SLOWEST_SHOWN) for _n, (f, t) in sorted(parts.items())])


def test_the_report_of_the_lists_is_the_report_of_their_digest(corpus) -> None:
    whole = [
        _text(findings_view(corpus.findings)),
        _text(transactions_summary(corpus.transactions, corpus.findings, corpus.capture.last_ts)),
        _text(stories_table(corpus.producers, corpus.account())),
        _text(partitions_overview([p for p in corpus.partitions if p.fetch_answers], corpus.findings)),
    ]
    assert "Slowest" in whole[1] and "Open at the end" in whole[1]
    assert _report(corpus, Digest.of(corpus.findings, corpus.transactions)) == whole


@pytest.mark.parametrize("how", ["per capture set", "per producer", "at random"])
def test_merged_digests_report_what_the_joined_lists_report(corpus, how: str) -> None:
    expected = _report(corpus, corpus.account())
    if how == "per capture set":
        part_of = lambda item: item.capture_set  # noqa: E731
    elif how == "per producer":
        part_of = lambda item: hash((item.transactional_id, item.producer_id)) % 7  # noqa: E731
    else:
        rng = random.Random(17)
        part_of = lambda item: rng.randrange(5)  # noqa: E731
    merged = _split(corpus, part_of)
    assert _report(corpus, merged) == expected
    assert merged.findings.counts() == corpus.account().findings.counts()
    assert len(merged.transactions.slowest) == SLOWEST_SHOWN  # bounded, whatever the parts held


def test_a_summary_that_holds_only_the_digest_says_what_the_lists_say(corpus) -> None:
    """What a Spark driver builds: the lists empty, the digest standing for them; the verdict and counts
    are the whole result's, and it cannot pose as a whole JSON document."""
    from dataclasses import replace

    digested = replace(corpus, findings=[], transactions=[], digest=_split(corpus, lambda i: i.capture_set))
    assert digested.summary() == corpus.summary()
    assert digested.unverified_because() == corpus.unverified_because()
    with pytest.raises(ValueError, match="digest"):
        digested.as_contract()
