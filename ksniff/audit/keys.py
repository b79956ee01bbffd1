"""How the audit partitions: the producer key of each event, for engines that group (Spark).

A producer key is the transactional id when the exchange carries one, else "pid:<producer id>" for an
idempotent producer, else "group:<group id>" for a consumer group's OffsetCommit. Everything the audit
concludes about one key depends only on that key's events plus the *context* events, which every
partition must see:

- ConnectionLost and ConnectionEnded (they say which findings rest on lost bytes, which requests were
  never answered);
- ApiVersions (the cluster's transaction.version);
- WriteTxnMarkers, which name producer ids only: each partition applies the markers of the producer ids
  it knows and ignores the rest.

Grouping by transactional id works without a producer id -> transactional id table because every
transactional request (Produce v3+ included) carries the transactional id itself. A Spark engine runs
`step` per key over that key's events plus the context events, each with `AuditState.initial(config,
key=K)`, and one more group with key CONTEXT_KEY over the context events alone: that group reports the
capture gaps, which belong to no producer. `merge_outputs` joins the groups' outputs.
"""

from __future__ import annotations

from ksniff.decode.events import ConnectionEnded, ConnectionLost, DecodeEvent, Exchange

CONTEXT_KEY = "@context"

CONTEXT_APIS = frozenset({"ApiVersions", "WriteTxnMarkers"})
_TXN_ID_APIS = frozenset({"InitProducerId", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit"})


def is_context(event: DecodeEvent) -> bool:
    """Whether every partition of the audit must see `event`."""
    if isinstance(event, ConnectionLost | ConnectionEnded):
        return True
    return event.api_name in CONTEXT_APIS


def producer_keys(event: DecodeEvent) -> tuple[str, ...]:
    """Every producer key `event` concerns (an AddPartitionsToTxn v4+ batch may name several)."""
    if not isinstance(event, Exchange) or event.request is None:
        return ()
    api, req = event.api_name, event.request
    if api == "Produce":
        if req.transactional_id:
            return (req.transactional_id,)
        pids = sorted({b.header.producer_id for b in event.batches if b.header.producer_id >= 0})
        return tuple(f"pid:{p}" for p in pids)
    if api in _TXN_ID_APIS:
        if req.transactional_id:
            return (req.transactional_id,)
        if api == "InitProducerId" and event.response is not None and event.response.producer_id >= 0:
            return (f"pid:{event.response.producer_id}",)
        return ()
    if api == "AddPartitionsToTxn":
        if event.api_version <= 3:
            return (req.v3_and_below_transactional_id,)
        return tuple(dict.fromkeys(t.transactional_id for t in req.transactions))
    if api == "OffsetCommit":
        return (f"group:{req.group_id}",)
    return ()


def producer_key(event: DecodeEvent) -> str | None:
    """The key to group `event` by; None for events no single producer owns (see `is_context`)."""
    keys = producer_keys(event)
    return keys[0] if keys else None
