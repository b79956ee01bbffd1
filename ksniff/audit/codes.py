"""The Kafka error codes the audit judges by (names come from the decode room's table)."""

from __future__ import annotations

from ksniff.decode.apis.errors import error_name

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
CONCURRENT_TRANSACTIONS = 51
UNKNOWN_PRODUCER_ID = 59
PRODUCER_FENCED = 90

# The broker's ways of saying "that instance is no longer the producer".
FENCING_ERRORS = frozenset({INVALID_PRODUCER_EPOCH, PRODUCER_FENCED})

__all__ = [
    "CONCURRENT_TRANSACTIONS",
    "DUPLICATE_SEQUENCE_NUMBER",
    "FENCING_ERRORS",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_TXN_STATE",
    "NONE",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "PRODUCER_FENCED",
    "UNKNOWN_PRODUCER_ID",
    "error_name",
]
