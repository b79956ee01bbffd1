"""The --records budget of a run is drawn set after set. The Spark engine audits each set where it is read
on a budget of its own and trusts the result only when the run's one budget would have treated every
batch alike: when what the sets before used plus the set's own peak (Inflation.peak) stays within the
run's cap. These tests hold that check exact on real compressed captures: at that bound the set's
records, counters and warnings are the same as on its own budget, one byte past it they are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksniff.config import EngineConfig
from ksniff.engine.local import audit_capture

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
CONFIG = EngineConfig(keep_records=True)


def _records(used: int, path: Path, peak: list | None = None):
    result, _identity = audit_capture([str(path)], CONFIG, records_used=used, peak=peak)
    dec = result.decode
    cuts = (dec.records_cut_by_batch_cap, dec.records_cut_by_request_cap, dec.records_cut_by_run_cap)
    return result.records, dec.records_inflated_bytes, cuts, result.warnings


@pytest.mark.parametrize(
    "name", ["idempotent_lz4_tansu.pcap", "idempotent_zstd_tansu.pcap", "idempotent_gzip_tansu.pcap"]
)
def test_a_set_on_its_own_budget_is_exact_up_to_its_peak_and_no_further(name: str) -> None:
    path = PCAPS / name
    if not path.exists():
        pytest.skip("no corpus captures")
    peak: list[int] = []
    alone = _records(0, path, peak)
    (top,) = peak
    rows, inflated, _cuts, _warnings = alone
    assert rows and 0 < inflated <= top <= CONFIG.max_records_run
    # The sets before used as much as they may: every batch treated alike.
    assert _records(CONFIG.max_records_run - top, path) == alone
    # One byte more: the batch at the peak meets the run's cap.
    past = _records(CONFIG.max_records_run - top + 1, path)
    assert past != alone
    assert past[2][2] > alone[2][2]  # cut by the run's cap
