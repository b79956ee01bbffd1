"""The names docs/contract.md promises (JSON keys, tables), written once for every test that checks them."""

from __future__ import annotations

TOP_KEYS = {"version", "inputs", "capture", "decode", "producers", "transactions", "findings"}
CAPTURE_KEYS = {
    "packets",
    "tcp_segments",
    "connections",
    "kafka_connections",
    "gaps",
    "gap_bytes",
    "first_ts",
    "last_ts",
}
DECODE_KEYS = {
    "requests",
    "responses",
    "exchanges",
    "unmatched_requests",
    "unmatched_responses",
    "errors",
    "by_api",
}
PRODUCER_KEYS = {
    "transactional_id",
    "producer_id",
    "epochs",
    "clients",
    "client_ids",
    "batches",
    "records",
    "transactions",
}
TXN_KEYS = {
    "transactional_id",
    "producer_id",
    "producer_epoch",
    "start_ts",
    "end_ts",
    "outcome",
    "partitions",
    "records",
    "groups",
}
FINDING_KEYS = {
    "kind",
    "severity",
    "ts",
    "transactional_id",
    "producer_id",
    "producer_epoch",
    "topic",
    "partition",
    "group",
    "message",
    "evidence",
}
# What a finding of a capture-set run adds (README: "Capture sets and clusters").
SET_FINDING_KEYS = {"capture_set", "cluster"}
TABLES = ("exchanges", "batches", "transactions", "findings", "partitions", "partition_log")
