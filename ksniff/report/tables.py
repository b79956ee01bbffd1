"""The four export tables (CONTRACT.md): row builders, an incremental accumulator, and pandas frames.

`exchanges` (one row per request/response), `batches` (one row per record batch written),
`transactions` and `findings`: the same fields as the JSON, one column each, sorted by time. With
`--records` only, a fifth table `records` holds every record's key, value and headers (base64). Rows are plain
dicts so the local engine can build them as events flow and Spark can build them inside its workers.

Conventions, the same in every table:

- time columns (`TIME_COLUMNS`) hold seconds since the epoch as floats, as in the JSON; the CSV export adds
  an `<name>_utc` text column beside each, the Parquet export stores them as UTC timestamps;
- integers that may be absent use pandas' nullable `Int64`, booleans `boolean`, text `string`;
- list fields (`partitions`, `groups`) and `evidence` are JSON text, so one schema serves CSV and Parquet
  and a notebook gets them back with `json.loads`.

The report room knows no protocol: message bodies are read by attribute name with None as default, so a
body lacking a field (or not decoded at all) simply leaves the cell empty.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ksniff.audit.model import Finding, Transaction
from ksniff.decode.events import Exchange, ProducedBatch
from ksniff.decode.records import iter_records

if TYPE_CHECKING:
    import pandas as pd

    from ksniff.result import AuditResult

try:  # the decode room's error table; the report still works (codes only) without it
    from ksniff.decode.apis.errors import error_name as _error_name
except ImportError:  # pragma: no cover - depends on what the decode room has landed
    _error_name = None

# Column -> pandas dtype, in column order. Documented here because CSV readers need them back:
# `pd.read_csv(path, dtype=EXCHANGE_SCHEMA, usecols=list(EXCHANGE_SCHEMA))` gives the frame back.
EXCHANGE_SCHEMA: dict[str, str] = {
    "ts": "float64",  # first byte of the request
    "response_ts": "float64",  # last byte of the response; empty when none came
    "latency_ms": "float64",
    "conn": "Int64",
    "client": "string",  # "ip:port"
    "broker": "string",
    "client_id": "string",
    "api": "string",  # Kafka's own name: Produce, InitProducerId, EndTxn, ...
    "api_version": "Int64",
    "correlation_id": "Int64",
    "status": "string",  # ok | no_response (acks=0) | unanswered
    "unverified": "boolean",  # the capture lost bytes on this connection before this exchange
    "transactional_id": "string",
    "producer_id": "Int64",
    "producer_epoch": "Int64",
    "error_code": "Int64",  # the response's top-level error code; empty where its version has none
    "error": "string",  # Kafka's name for error_code
    "decode_error": "string",  # why a body was not decoded
    # Additions: what the request asked and every part of the answer (not for Produce, whose batches have
    # their own rows, nor Fetch).
    "request_detail": "string",  # commit | abort (EndTxn), group G, timeout N ms (InitProducerId)
    "partitions": "string",  # JSON list of the "topic-partition"s the request names
    # the top-level error if any, else the first per-partition one other than OPERATION_NOT_ATTEMPTED
    # (which only says another partition failed), else that; NONE if none
    "worst_error": "string",
    "partition_errors": "string",  # JSON list of "topic-partition ERROR" for every partition not NONE
}

BATCH_SCHEMA: dict[str, str] = {
    "ts": "float64",
    "response_ts": "float64",
    "conn": "Int64",
    "client": "string",
    "broker": "string",
    "client_id": "string",
    "transactional_id": "string",
    "topic": "string",
    "partition": "Int64",
    "producer_id": "Int64",
    "producer_epoch": "Int64",
    "base_sequence": "Int64",
    "last_sequence": "Int64",  # base_sequence + last_offset_delta, wrapping as Kafka does; -1 if none
    "records": "Int64",
    "codec": "string",
    "transactional": "boolean",
    "control": "boolean",
    "crc_ok": "boolean",  # empty when the batch was not whole in the capture
    "error_code": "Int64",  # the broker's answer for this partition; empty without a response
    "error": "string",
    "base_offset": "Int64",  # assigned by the broker
    "unverified": "boolean",
    "correlation_id": "Int64",
    "api_version": "Int64",
    "acks": "Int64",
}

TRANSACTION_SCHEMA: dict[str, str] = {
    "start_ts": "float64",
    "end_ts": "float64",  # empty while open or when the end was not captured
    "duration_ms": "float64",
    "transactional_id": "string",
    "producer_id": "Int64",
    "producer_epoch": "Int64",
    "outcome": "string",  # commit | abort | open | unknown
    "partitions": "string",  # JSON list of "topic-partition"
    "records": "Int64",
    "groups": "string",  # JSON list of consumer groups whose offsets it committed
    "client": "string",  # "ip:port" of the instance whose request began it, where seen
}

FINDING_SCHEMA: dict[str, str] = {
    "ts": "float64",
    "severity": "string",
    "kind": "string",
    "transactional_id": "string",
    "producer_id": "Int64",
    "producer_epoch": "Int64",
    "topic": "string",
    "partition": "Int64",
    "group": "string",
    "message": "string",
    "evidence": "string",  # JSON object
    "client": "string",  # "ip:port" the finding is about, where it is about one connection
    "unverified": "boolean",  # it rests on bytes the capture lost
}

# Only with --records: record keys and values are private data, never exported unless asked for.
RECORD_SCHEMA: dict[str, str] = {
    "ts": "float64",  # the Produce request's
    "topic": "string",
    "partition": "Int64",
    "offset": "Int64",  # assigned by the broker; empty when its answer was not captured
    "producer_id": "Int64",
    "transactional_id": "string",
    "timestamp_ms": "Int64",  # the record's own timestamp
    "key": "string",  # base64 (keys and values are bytes); empty for a null key
    "value": "string",  # base64; empty for a null value (a tombstone)
    "headers": "string",  # JSON list of [key, base64 value or null]
}

SCHEMAS: dict[str, dict[str, str]] = {
    "exchanges": EXCHANGE_SCHEMA,
    "batches": BATCH_SCHEMA,
    "transactions": TRANSACTION_SCHEMA,
    "findings": FINDING_SCHEMA,
    "records": RECORD_SCHEMA,
}

EXCHANGE_COLUMNS = tuple(EXCHANGE_SCHEMA)
BATCH_COLUMNS = tuple(BATCH_SCHEMA)
TRANSACTION_COLUMNS = tuple(TRANSACTION_SCHEMA)
FINDING_COLUMNS = tuple(FINDING_SCHEMA)

# The column each table is sorted by, and every column holding epoch seconds.
SORT_COLUMN = {"exchanges": "ts", "batches": "ts", "transactions": "start_ts", "findings": "ts",
               "records": "ts"}
TIME_COLUMNS = {
    "exchanges": ("ts", "response_ts"),
    "batches": ("ts", "response_ts"),
    "transactions": ("start_ts", "end_ts"),
    "findings": ("ts",),
    "records": ("ts",),
}

_SEQUENCE_MODULUS = 2**31  # producer sequences wrap to 0 after Int32.MAX


def error_name(code: int | None) -> str | None:
    """Kafka's name for an error code (NONE for 0), or None when there is no code."""
    if code is None:
        return None
    if _error_name is not None:
        return _error_name(code)
    return "NONE" if code == 0 else None


def to_json_text(value: Any) -> str:
    """Compact, key-sorted JSON for list and evidence cells; JSONable values as `json_default` allows."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=json_default)


def json_default(value: Any) -> Any:
    """What the exports accept besides JSON's own types; anything else is a bug and raises TypeError."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


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


def _millis(seconds: float | None) -> float | None:
    # to the microsecond: float epochs subtract with sub-microsecond noise nobody wants in a table
    return None if seconds is None else round(seconds * 1000.0, 3)


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
_WALKED = frozenset({"AddPartitionsToTxn", "TxnOffsetCommit", "WriteTxnMarkers", "OffsetCommit",
                     "OffsetFetch", "ListOffsets", "DeleteRecords", "OffsetForLeaderEpoch", "OffsetDelete",
                     "DescribeProducers"})


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
    """"topic-partition ERROR" for every partition the broker did not answer NONE."""
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
    if ex.api_name not in _WALKED:
        # Produce and Fetch answer per partition in their batch rows: no worst without a top-level error.
        per_partition = ex.api_name in ("Produce", "Fetch")
        worst = error_name(error_code) if error_code is not None else (
            "NONE" if ex.response is not None and not per_partition else None)
        return {"request_detail": _request_detail(ex.request), "partitions": None, "worst_error": worst,
                "partition_errors": None}
    errors = _partition_answers(ex.response) if ex.response is not None else []
    worst = error_name(error_code) if error_code else None
    if worst is None and errors:
        names = [e.rsplit(" ", 1)[1] for e in errors]
        worst = next((n for n in names if n != "OPERATION_NOT_ATTEMPTED"), names[0])
    if worst is None and ex.response is not None:
        worst = "NONE"
    partitions = _asked_partitions(ex.request) if ex.request is not None else []
    return {"request_detail": _request_detail(ex.request),
            "partitions": to_json_text(partitions) if partitions else None, "worst_error": worst,
            "partition_errors": to_json_text(errors) if errors else None}


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
        "latency_ms": _millis(ex.latency),
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


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    if base_sequence < 0:
        return -1
    return (base_sequence + last_offset_delta) % _SEQUENCE_MODULUS


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


def record_rows(b: ProducedBatch) -> list[dict[str, Any]]:
    """Rows of `records` for one batch whose bytes were kept (--records); [] when they were not, and
    when they do not decode (a damaged or cut batch: its header row in `batches` still says so)."""
    if b.records is None or b.header.control:
        return []
    try:
        records = list(iter_records(b.records))
    except ValueError:  # damaged, cut, or past the decompression cap: no rows, the batch row remains
        return []
    first = b.header.base_offset
    return [{
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
    } for r in records]


def transaction_row(t: Transaction) -> dict[str, Any]:
    return {
        "start_ts": t.start_ts,
        "end_ts": t.end_ts,
        "duration_ms": None if t.end_ts is None else _millis(t.end_ts - t.start_ts),
        "transactional_id": t.transactional_id,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "outcome": t.outcome,
        "partitions": to_json_text(list(t.partitions)),
        "records": t.records,
        "groups": to_json_text(list(t.groups)),
        "client": getattr(t, "client", None),
    }


def finding_row(f: Finding) -> dict[str, Any]:
    return {
        "ts": f.ts,
        "severity": f.severity,
        "kind": f.kind,
        "transactional_id": f.transactional_id,
        "producer_id": f.producer_id,
        "producer_epoch": f.producer_epoch,
        "topic": f.topic,
        "partition": f.partition,
        "group": f.group,
        "message": f.message,
        "evidence": to_json_text(f.evidence),
        "client": f.evidence.get("client"),
        "unverified": bool(f.evidence.get("unverified")),
    }


def _ts_key(row: dict[str, Any]) -> float:
    return row["ts"]


@dataclass(slots=True)
class TableRows:
    """Builds the `exchanges` and `batches` rows as the decode room hands over exchanges.

    Exchanges complete in response order, not request order, so `finish()` sorts (stably, by request time)
    once at the end rather than on every insert.
    """

    exchanges: list[dict[str, Any]] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)

    def add(self, ex: Exchange) -> None:
        self.exchanges.append(exchange_row(ex))
        self.batches.extend(batch_row(b) for b in ex.batches)

    def extend(self, events: Iterable[object]) -> None:
        """Adds every Exchange among decode events; connection events have no row."""
        for event in events:
            if isinstance(event, Exchange):
                self.add(event)

    def finish(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        self.exchanges.sort(key=_ts_key)
        self.batches.sort(key=_ts_key)
        return self.exchanges, self.batches


def frame(rows: Iterable[dict[str, Any]], table: str) -> pd.DataFrame:
    """One table as a DataFrame: the schema's columns and dtypes, sorted by time, index 0..n-1."""
    import pandas as pd  # here, not at the top: importing pandas costs half a second every audit

    schema = SCHEMAS[table]
    df = pd.DataFrame.from_records(list(rows), columns=list(schema))
    # `None` in a float column must become NaN before astype; pandas does that for object columns.
    df = df.astype(schema)
    return df.sort_values(SORT_COLUMN[table], kind="stable", ignore_index=True)


def frames(result: AuditResult) -> dict[str, pd.DataFrame]:
    """The four tables of CONTRACT.md; empty tables still carry their columns and dtypes."""
    return {
        "exchanges": frame(result.exchanges, "exchanges"),
        "batches": frame(result.batches, "batches"),
        "transactions": frame((transaction_row(t) for t in result.transactions), "transactions"),
        "findings": frame((finding_row(f) for f in result.findings), "findings"),
        **({} if result.records is None else {"records": frame(result.records, "records")}),
    }


# Times a calendar holds: years 1 to 9999 UTC (Python's datetime). A capture may carry any 64-bit time;
# outside this range a time keeps its epoch seconds but has no calendar form (an empty `_utc` cell in the
# CSV, a null timestamp in Parquet and in the DataFrames, its seconds on the terminal).
FIRST_CALENDAR_SECOND = -62_135_596_800.0  # 0001-01-01T00:00:00Z
END_CALENDAR_SECOND = 253_402_300_800.0  # 10000-01-01T00:00:00Z


def in_calendar(seconds: float | None) -> bool:
    return seconds is not None and FIRST_CALENDAR_SECOND <= seconds < END_CALENDAR_SECOND


def utc_timestamps(epoch_seconds: pd.Series) -> pd.Series:
    """Float epoch seconds as UTC timestamps with microsecond resolution (NaN, and a time outside the
    calendar's years 1-9999, become NaT)."""
    # Through whole microseconds: a float epoch is off by a few hundred ns, which must not truncate.
    import pandas as pd

    inside = (epoch_seconds >= FIRST_CALENDAR_SECOND) & (epoch_seconds < END_CALENDAR_SECOND)
    micros = epoch_seconds.where(inside).mul(1e6).round()
    return pd.to_datetime(micros, unit="us", utc=True).astype("datetime64[us, UTC]")


def with_datetimes(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """A copy whose time columns are UTC timestamps instead of epoch seconds."""
    out = df.copy()
    for col in TIME_COLUMNS[table]:
        out[col] = utc_timestamps(out[col])
    return out
