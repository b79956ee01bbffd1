"""The few Kafka error codes the audit judges by, and how it names them in evidence."""

from __future__ import annotations

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

_NAMES = {
    NONE: "NONE",
    OUT_OF_ORDER_SEQUENCE_NUMBER: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    DUPLICATE_SEQUENCE_NUMBER: "DUPLICATE_SEQUENCE_NUMBER",
    INVALID_PRODUCER_EPOCH: "INVALID_PRODUCER_EPOCH",
    INVALID_TXN_STATE: "INVALID_TXN_STATE",
    CONCURRENT_TRANSACTIONS: "CONCURRENT_TRANSACTIONS",
    UNKNOWN_PRODUCER_ID: "UNKNOWN_PRODUCER_ID",
    PRODUCER_FENCED: "PRODUCER_FENCED",
}


def error_name(code: int | None) -> str | None:
    """Kafka's name for an error code (None when there was no answer)."""
    if code is None:
        return None
    return _NAMES.get(code, f"ERROR_{code}")
