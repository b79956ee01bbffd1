"""The export tables (docs/contract.md): their schemas, the audit's rows, and pandas frames.

`exchanges` (one row per request/response), `batches` (one row per record batch written),
`transactions` and `findings`: the same fields as the JSON, one column each, sorted by time. With
`--records` only, a fifth table `records` holds every record's key, value and headers (base64). Rows are plain
dicts so the local engine can build them as events flow and Spark can build them inside its workers; the
rows of decode events (`exchanges`, `batches`, `records`) are built by the decode room
(ksniff.decode.rows), which knows the message bodies, to the schemas here.

Conventions, the same in every table:

- time columns (`TIME_COLUMNS`) hold seconds since the epoch as floats, as in the JSON; the CSV export adds
  an `<name>_utc` text column beside each, the Parquet export stores them as UTC timestamps;
- integers that may be absent use pandas' nullable `Int64`, booleans `boolean`, text `string`;
- list fields (`partitions`, `groups`) and `evidence` are JSON text, so one schema serves CSV and Parquet
  and a notebook gets them back with `json.loads`.

The report room knows no protocol: it reads rows and the audit's results, never a message body.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ksniff.audit.model import Finding, Transaction
from ksniff.common.cells import millis, to_json_text

if TYPE_CHECKING:
    import pandas as pd

    from ksniff.result import AuditResult

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
    "capture_set": "Int64",  # the capture set it was audited in (ksniff.engine.sets)
    "cluster": "string",  # the cluster id its set's brokers named, when exactly one
    "outcome_source": "string",  # end_txn | markers | takeover | next_transaction | request
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
    "capture_set": "Int64",
    "cluster": "string",
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

# Each topic-partition's log as the wire showed it (ksniff.audit.partlog): one row per partition, and one
# row per batch of its log (`partition_log`). `order` is the row's place in topic, partition, capture set,
# offset order: these tables have no time column (a log is read by offset), so they sort by `order`.
PARTITION_SCHEMA: dict[str, str] = {
    "order": "Int64",
    "topic": "string",
    "partition": "Int64",
    "high_watermark": "Int64",  # the highest a Fetch answer gave
    "last_stable_offset": "Int64",  # the latest a Fetch answer gave
    "log_start_offset": "Int64",
    "end_offset": "Int64",  # one past the highest offset known to hold something
    "acked_batches": "Int64",
    "acked_records": "Int64",
    "fetch_answers": "Int64",
    "fetched_batches": "Int64",  # counted again when read again
    "fetched_records": "Int64",
    "commit_markers": "Int64",
    "abort_markers": "Int64",
    "aborted_entries": "Int64",  # aborted-transaction entries in Fetch answers
    "forgotten": "Int64",  # batches past the per-partition bound
    "producers": "string",  # JSON list: producer id, transactional id, epochs, offsets, sequences
    "readers": "string",  # JSON list: client, client id, isolation level, fetches, records, offsets
    "capture_set": "Int64",  # captures of unrelated sets never share a log: one row per set
    "cluster": "string",
}

PARTITION_LOG_SCHEMA: dict[str, str] = {
    "order": "Int64",
    "topic": "string",
    "partition": "Int64",
    "first_offset": "Int64",
    "last_offset": "Int64",
    "kind": "string",  # data | transactional | COMMIT | ABORT
    "producer_id": "Int64",
    "producer_epoch": "Int64",
    "base_sequence": "Int64",
    "transactional_id": "string",
    "outcome": "string",  # commit | abort, once a marker or EndTxn says; empty otherwise
    "acked": "boolean",  # a Produce answer placed it here
    "acks": "Int64",
    "acked_by": "string",
    "fetched": "boolean",  # a Fetch answer returned it
    "first_read_by": "string",
    "capture_set": "Int64",
    "cluster": "string",
}

SCHEMAS: dict[str, dict[str, str]] = {
    "exchanges": EXCHANGE_SCHEMA,
    "batches": BATCH_SCHEMA,
    "transactions": TRANSACTION_SCHEMA,
    "findings": FINDING_SCHEMA,
    "records": RECORD_SCHEMA,
    "partitions": PARTITION_SCHEMA,
    "partition_log": PARTITION_LOG_SCHEMA,
}

EXCHANGE_COLUMNS = tuple(EXCHANGE_SCHEMA)
BATCH_COLUMNS = tuple(BATCH_SCHEMA)
TRANSACTION_COLUMNS = tuple(TRANSACTION_SCHEMA)
FINDING_COLUMNS = tuple(FINDING_SCHEMA)

# The column each table is sorted by, and every column holding epoch seconds.
SORT_COLUMN = {
    "exchanges": "ts",
    "batches": "ts",
    "transactions": "start_ts",
    "findings": "ts",
    "records": "ts",
    "partitions": "order",
    "partition_log": "order",
}
TIME_COLUMNS = {
    "exchanges": ("ts", "response_ts"),
    "batches": ("ts", "response_ts"),
    "transactions": ("start_ts", "end_ts"),
    "findings": ("ts",),
    "records": ("ts",),
    "partitions": (),
    "partition_log": (),
}


def transaction_row(t: Transaction) -> dict[str, Any]:
    return {
        "start_ts": t.start_ts,
        "end_ts": t.end_ts,
        "duration_ms": None if t.end_ts is None else millis(t.end_ts - t.start_ts),
        "transactional_id": t.transactional_id,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "outcome": t.outcome,
        "partitions": to_json_text(list(t.partitions)),
        "records": t.records,
        "groups": to_json_text(list(t.groups)),
        "client": getattr(t, "client", None),
        "capture_set": t.capture_set,
        "cluster": t.cluster,
        "outcome_source": t.outcome_source,
    }


def partition_rows(partitions: Iterable[Any]) -> list[dict[str, Any]]:
    """The `partitions` table: one row per topic-partition (PartitionSummary)."""
    rows = []
    for n, p in enumerate(partitions):
        row = {
            name: getattr(p, name, None)
            for name in PARTITION_SCHEMA
            if name not in ("order", "producers", "readers")
        }
        row.update(order=n, producers=to_json_text(list(p.producers)), readers=to_json_text(list(p.readers)))
        rows.append(row)
    return rows


def partition_log_rows(partitions: Iterable[Any]) -> list[dict[str, Any]]:
    """The `partition_log` table: each partition's batches in offset order."""
    rows = []
    for p in partitions:
        for b in p.log:
            row = {name: b.get(name) for name in PARTITION_LOG_SCHEMA}
            row.update(
                order=len(rows),
                topic=p.topic,
                partition=p.partition,
                capture_set=p.capture_set,
                cluster=p.cluster,
            )
            rows.append(row)
    return rows


def finding_row(f: Finding) -> dict[str, Any]:
    return {
        "ts": f.ts,
        "severity": f.severity,
        "kind": f.kind,
        **f.subject(),
        "evidence": to_json_text(f.evidence),
        "client": f.evidence.get("client"),
        "unverified": bool(f.evidence.get("unverified")),
        "capture_set": f.capture_set,
        "cluster": f.cluster,
    }


def frame(rows: Iterable[dict[str, Any]], table: str) -> pd.DataFrame:
    """One table as a DataFrame: the schema's columns and dtypes, sorted by time, index 0..n-1."""
    import pandas as pd  # here, not at the top: importing pandas costs half a second every audit

    schema = SCHEMAS[table]
    df = pd.DataFrame.from_records(list(rows), columns=list(schema))
    # `None` in a float column must become NaN before astype; pandas does that for object columns.
    df = df.astype(schema)
    return df.sort_values(SORT_COLUMN[table], kind="stable", ignore_index=True)


def frames(result: AuditResult) -> dict[str, pd.DataFrame]:
    """The tables of docs/contract.md; empty tables still carry their columns and dtypes."""
    return {
        "exchanges": frame(result.exchanges, "exchanges"),
        "batches": frame(result.batches, "batches"),
        "transactions": frame((transaction_row(t) for t in result.transactions), "transactions"),
        "findings": frame((finding_row(f) for f in result.findings), "findings"),
        "partitions": frame(partition_rows(result.partitions), "partitions"),
        "partition_log": frame(partition_log_rows(result.partitions), "partition_log"),
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
