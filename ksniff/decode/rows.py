"""The export rows of decode events: one per exchange, per record batch, and per record (--records).

The decode room knows the message bodies, so it flattens them into the columns of the report room's
tables (ksniff.report.tables holds the schemas; tests hold the two to the same columns). Bodies are read
by attribute name with None as default, so a body lacking a field (or not decoded at all) simply leaves
the cell empty. The engines call these as they release exchanges (docs/contract.md).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from types import SimpleNamespace
from typing import Any

from ksniff.common.cells import millis, to_json_text
from ksniff.decode.apis.errors import error_name
from ksniff.decode.events import Exchange, ProducedBatch, last_sequence
from ksniff.decode.records import MAX_DECOMPRESSED, Inflation, TooLarge, cap_needed, iter_records

__all__ = ["batch_row", "exchange_row", "iter_record_rows", "record_rows"]


def _body_field(body: Any, name: str) -> Any:
    return None if body is None else getattr(body, name, None)


def _known_id(value: Any) -> int | None:
    """Kafka sends -1 for 'no producer id / epoch'; the tables leave such cells empty."""
    return value if isinstance(value, int) and value >= 0 else None


def _producer_of(ex: Exchange) -> tuple[int | None, int | None]:
    """The producer id and epoch an exchange speaks for, wherever the exchange carries them."""
    req, resp = ex.request, ex.response
    # Produce carries them in its batch headers; InitProducerId asks with -1 and learns them from the answer;
    # AddPartitionsToTxn v0-3 names them with a prefix, v4+ (a batch from a broker) per transaction.
    # (A decoded v4+ body still has the v0-3 fields, filled with defaults: 0 would pass for an id.)
    # getattr on None with a default is None: no test for a missing body (once per exchange, it shows).
    pid = getattr(req, "producer_id", None)
    if isinstance(pid, int) and pid >= 0:
        return pid, _known_id(getattr(req, "producer_epoch", None))
    if getattr(req, "transactions", None):
        only = _only_transaction(req)
        pid = getattr(only, "producer_id", None)
        if isinstance(pid, int) and pid >= 0:
            return pid, _known_id(getattr(only, "producer_epoch", None))
    else:
        pid = getattr(req, "v3_and_below_producer_id", None)
        if isinstance(pid, int) and pid >= 0:
            return pid, _known_id(getattr(req, "v3_and_below_producer_epoch", None))
    if ex.batches:
        h = ex.batches[0].header
        if h.producer_id >= 0:
            return h.producer_id, _known_id(h.producer_epoch)
    pid = getattr(resp, "producer_id", None)
    if isinstance(pid, int) and pid >= 0:
        return pid, _known_id(getattr(resp, "producer_epoch", None))
    return None, None


def _only_transaction(req: Any) -> Any:
    """The one transaction of a batched request (AddPartitionsToTxn v4+) that names just one."""
    batch = _body_field(req, "transactions")
    return batch[0] if isinstance(batch, (list, tuple)) and len(batch) == 1 else None


def _transactional_id_of(req: Any) -> str | None:
    if _body_field(req, "transactions"):  # v4+: its v0-3 fields hold defaults
        return _body_field(_only_transaction(req), "transactional_id")
    for name in ("transactional_id", "v3_and_below_transactional_id"):
        value = _body_field(req, name)
        if value is not None:
            return value
    return _body_field(_only_transaction(req), "transactional_id")


# Bodies walked for partitions and per-partition answers: the APIs whose requests name partitions and
# whose answers are per partition. Not Produce (its batches have rows of their own) nor Fetch (not the
# audit's, and large); not the others either: walking ApiVersions' or Metadata's lists for nothing made a
# row cost ten times as much (48 against 5 us per row over the corpus).
_WALKED = frozenset(
    {
        "AddPartitionsToTxn",
        "TxnOffsetCommit",
        "WriteTxnMarkers",
        "OffsetCommit",
        "OffsetFetch",
        "ListOffsets",
        "DeleteRecords",
        "OffsetForLeaderEpoch",
        "OffsetDelete",
        "DescribeProducers",
    }
)


def _fields(node: Any) -> Iterable[tuple[str, Any]]:
    names = getattr(node, "_fields", None)
    if names is not None:
        return zip(names, node, strict=False)
    if isinstance(node, SimpleNamespace):
        return vars(node).items()
    return ()


def _walk_partitions(node: Any, topic: str | None, out: list[tuple[str, int, int]]) -> None:
    """(topic, partition, its error code or 0) for every partition a body names, however it nests them:
    structs with a partition index under a named topic, or a topic's plain list of partition numbers."""
    index = None
    code = 0
    arrays = []
    for key, value in _fields(node):
        cls = value.__class__
        if cls is str:
            if key == "name":
                topic = value
        elif cls is int:
            if key == "partition_index" or key == "index":
                index = value
            elif not code and key.endswith("error_code"):
                code = value
        elif (cls is list or cls is tuple) and key[0] != "_":  # arrays (a struct is a tuple subclass)
            arrays.append((key, value))
    if topic is not None and index is not None:
        out.append((topic, index, code))
        return
    for key, value in arrays:
        for item in value:
            if item.__class__ is int:
                if topic is not None and "partition" in key:
                    out.append((topic, item, 0))
            elif item is not None:
                _walk_partitions(item, topic, out)


def _partition_answers(body: Any) -> list[str]:
    """ "topic-partition ERROR" for every partition the broker did not answer NONE."""
    found: list[tuple[str, int, int]] = []
    _walk_partitions(body, None, found)
    return [f"{topic}-{partition} {error_name(code) or code}" for topic, partition, code in found if code]


def _asked_partitions(body: Any) -> list[str]:
    found: list[tuple[str, int, int]] = []
    _walk_partitions(body, None, found)
    return list(dict.fromkeys(f"{topic}-{partition}" for topic, partition, _ in found))


def _request_detail(req: Any) -> str | None:
    committed = _body_field(req, "committed")
    if isinstance(committed, bool):
        return "commit" if committed else "abort"
    group = _body_field(req, "group_id")
    if isinstance(group, str):
        return f"group {group}"
    timeout = _body_field(req, "transaction_timeout_ms")
    if isinstance(timeout, int):
        return f"timeout {timeout} ms"
    return None


def _walked_cells(ex: Exchange, error_code: int | None) -> dict[str, Any]:
    if ex.api_name == "Produce" and ex.response is not None and ex.batches:
        # Its per-partition answers are already on its batches (one row each in `batches`): no walk.
        errors = [
            f"{b.topic}-{b.partition} {error_name(b.error_code) or b.error_code}"
            for b in ex.batches
            if b.error_code
        ]
        worst = errors[0].rsplit(" ", 1)[1] if errors else "NONE"
        return {
            "request_detail": None,
            "partitions": None,
            "worst_error": worst,
            "partition_errors": to_json_text(errors) if errors else None,
        }
    if ex.api_name not in _WALKED:
        # Fetch answers per partition in its own rows: no worst without a top-level error.
        per_partition = ex.api_name in ("Produce", "Fetch")
        worst = (
            error_name(error_code)
            if error_code is not None
            else ("NONE" if ex.response is not None and not per_partition else None)
        )
        return {
            "request_detail": _request_detail(ex.request),
            "partitions": None,
            "worst_error": worst,
            "partition_errors": None,
        }
    errors = _partition_answers(ex.response) if ex.response is not None else []
    worst = error_name(error_code) if error_code else None
    if worst is None and errors:
        names = [e.rsplit(" ", 1)[1] for e in errors]
        worst = next((n for n in names if n != "OPERATION_NOT_ATTEMPTED"), names[0])
    if worst is None and ex.response is not None:
        worst = "NONE"
    partitions = _asked_partitions(ex.request) if ex.request is not None else []
    return {
        "request_detail": _request_detail(ex.request),
        "partitions": to_json_text(partitions) if partitions else None,
        "worst_error": worst,
        "partition_errors": to_json_text(errors) if errors else None,
    }


_top_error_versions: dict[type, Any] = {}


def _top_error(ex: Exchange) -> int | None:
    """The response's top-level error code, None where the response has none at its version (a decoded
    body fills absent fields with defaults: AddPartitionsToTxn v0-3 would otherwise say NONE)."""
    resp = ex.response
    code = _body_field(resp, "error_code")
    if code is None:
        return None
    cls = type(resp)
    if cls not in _top_error_versions:
        field = next((f for f in getattr(cls, "_schema", None) or () if f.name == "error_code"), None)
        _top_error_versions[cls] = None if field is None else field.versions
    versions = _top_error_versions[cls]
    return code if versions is None or versions.contains(ex.api_version) else None


def exchange_row(ex: Exchange) -> dict[str, Any]:
    """One row of `exchanges`: the request's identity and what it asked, the broker's answer (top-level,
    per partition, and the worst of them)."""
    producer_id, epoch = _producer_of(ex)
    error_code = _top_error(ex)
    return {
        "ts": ex.request_ts,
        "response_ts": ex.response_ts,
        "latency_ms": millis(ex.latency),
        "conn": ex.conn,
        "client": ex.client,
        "broker": ex.broker,
        "client_id": ex.client_id,
        "api": ex.api_name,
        "api_version": ex.api_version,
        "correlation_id": ex.correlation_id,
        "status": ex.status,
        "unverified": ex.unverified,
        "transactional_id": _transactional_id_of(ex.request),
        "producer_id": producer_id,
        "producer_epoch": epoch,
        "error_code": error_code,
        "error": error_name(error_code),
        "decode_error": ex.decode_error,
        **_walked_cells(ex, error_code),
    }


def batch_row(b: ProducedBatch) -> dict[str, Any]:
    """One row of `batches`: a record batch header and the broker's answer for its partition."""
    h = b.header
    return {
        "ts": b.ts,
        "response_ts": b.response_ts,
        "conn": b.conn,
        "client": b.client,
        "broker": b.broker,
        "client_id": b.client_id,
        "transactional_id": b.transactional_id,
        "topic": b.topic,
        "partition": b.partition,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "last_sequence": last_sequence(h.base_sequence, h.last_offset_delta),
        "records": h.records_count,
        "codec": h.codec,
        "transactional": h.transactional,
        "control": h.control,
        "crc_ok": h.crc_ok,
        "error_code": b.error_code,
        "error": error_name(b.error_code),
        "base_offset": b.base_offset,
        "unverified": b.unverified,
        "correlation_id": b.correlation_id,
        "api_version": b.api_version,
        "acks": b.acks,
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def record_rows(b: ProducedBatch, inflation: Inflation | None = None) -> list[dict[str, Any]]:
    """Rows of `records` for one batch whose bytes were kept (--records): `iter_record_rows` as a list."""
    return list(iter_record_rows(b, inflation))


def iter_record_rows(b: ProducedBatch, inflation: Inflation | None = None) -> Iterator[dict[str, Any]]:
    """Rows of `records` for one batch whose bytes were kept (--records), one record at a time (a batch
    of tiny records makes millions of rows: a caller streaming them holds only a chunk). None when the
    bytes were not kept or are past a decompression cap (`inflation`: the run's budget; the batch's own
    cap when None); rows stop at the first damaged record (a damaged or cut batch: its header row in
    `batches` still says so)."""
    if b.records is None or b.header.control:
        return
    cap, which = (MAX_DECOMPRESSED, "batch") if inflation is None else inflation.cap()
    inflated: list[int] = []
    first = b.header.base_offset
    before = 0 if inflation is None else inflation.run_used
    judged = cap  # what of the budget this batch needed (Inflation.peak): the cap, unless it fit
    try:
        for r in iter_records(b.records, max(cap, 0), inflated):
            if inflated and inflation is not None:
                inflation.used(inflated.pop())
            yield {
                "ts": b.ts,
                "topic": b.topic,
                "partition": b.partition,
                "offset": None if b.base_offset is None else b.base_offset + r.offset - first,
                "producer_id": b.header.producer_id,
                "transactional_id": b.transactional_id,
                "timestamp_ms": r.timestamp,
                "key": _b64(r.key),
                "value": _b64(r.value),
                "headers": to_json_text([[k, _b64(v)] for k, v in r.headers]),
            }
        if inflation is not None and inflation.peak is not None:
            judged = cap_needed(b.records, inflation.run_used - before + sum(inflated))
    except TooLarge:
        if inflation is not None:
            inflation.cut(which)
    except ValueError:  # damaged or cut: the rows before the damage stay, the batch row remains
        pass
    finally:
        if inflated and inflation is not None:
            inflation.used(inflated.pop())
        if inflation is not None:
            inflation.needed(before, judged)
