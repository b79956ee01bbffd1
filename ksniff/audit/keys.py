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
transactional request (Produce v3+ included) carries the transactional id itself. Keys still share state
when one producer id shows under two keys (under a transactional id in one capture and as "pid:N" in
another) or a group is committed to both by a transaction and directly: `touched_keys` names every key an
event touches, and `fold_groups` folds keys touched together into one group. A Spark engine runs `step`
per group over its events plus the context events, with `AuditState.initial(config, key=G, keys=KEYS)`,
and one more group with key CONTEXT_KEY over the context events alone: that group reports the capture
gaps, which belong to no producer. `merge_outputs` joins the groups' outputs.
"""

from __future__ import annotations

from collections.abc import Iterable

from ksniff.decode.events import ConnectionEnded, ConnectionLost, DecodeEvent, Exchange
from ksniff.decode.schema import Primitive
from ksniff.decode.values import Struct

CONTEXT_KEY = "@context"

CONTEXT_APIS = frozenset({"ApiVersions", "WriteTxnMarkers"})
# What the partition logs read (ksniff.audit.partlog.LOG_APIS): a partitioned run gives these exchanges to
# the CONTEXT_KEY group too, whose fold keeps the logs.
# InitProducerId too: with Produce, what the idempotence watch reads (ksniff.audit.idempotence), and the
# transaction timeouts the logs judge hanging partitions by.
LOG_APIS = frozenset(
    {
        "Produce",
        "Fetch",
        "EndTxn",
        "WriteTxnMarkers",
        "OffsetCommit",
        "TxnOffsetCommit",
        "InitProducerId",
        "ListOffsets",
        "OffsetFetch",
        "Metadata",
    }
)
_TXN_ID_APIS = frozenset({"InitProducerId", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit"})


def is_context(event: DecodeEvent) -> bool:
    """Whether every partition of the audit must see `event`."""
    if isinstance(event, ConnectionLost | ConnectionEnded):
        return True
    return event.api_name in CONTEXT_APIS


def is_log_event(event: DecodeEvent) -> bool:
    """Whether the partition logs read `event` (the CONTEXT_KEY group's fold must see it)."""
    return isinstance(event, Exchange) and event.api_name in LOG_APIS


def producer_keys(event: DecodeEvent) -> tuple[str, ...]:
    """Every producer key `event` concerns (an AddPartitionsToTxn v4+ batch may name several)."""
    if not isinstance(event, Exchange) or event.request is None:
        return ()
    api, req = event.api_name, event.request
    if api == "Produce":
        if req.transactional_id:
            return (req.transactional_id,)
        batches = [b.header for b in event.batches if b.header.crc_ok is not False]  # not a damaged one's
        pids = sorted({h.producer_id for h in batches if h.producer_id >= 0})
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


def touched_keys(event: DecodeEvent) -> frozenset[str]:
    """Every producer key whose audit state `event` may read or change: its own (`producer_keys`) and the
    keys named anywhere in it, by producer id ("pid:N", from its batches and bodies), by group id
    ("group:G") and by transactional id. Empty for an event no key owns (context events included: every
    group sees those). Naming too many keys costs only parallelism, never correctness."""
    own = producer_keys(event)
    if not own:
        return frozenset()
    found = set(own)
    found.update(f"pid:{b.header.producer_id}" for b in event.batches if b.header.producer_id >= 0)
    for body in (event.request, event.response):
        if isinstance(body, Struct):
            _named_in(body, found)
    return frozenset(found)


def _named_in(body: Struct, found: set[str]) -> None:
    for i, kind in _fields_to_read(type(body)):
        value = body[i]
        if isinstance(value, tuple):
            for item in value:
                if isinstance(item, Struct):
                    _named_in(item, found)
        elif kind == _PID:
            if isinstance(value, int) and value >= 0:
                found.add(f"pid:{value}")
        elif kind == _GROUP:
            if isinstance(value, str) and value:
                found.add(f"group:{value}")
        elif kind == _TXN and isinstance(value, str) and value:
            found.add(value)


_NESTED, _PID, _GROUP, _TXN = 0, 1, 2, 3
_READ: dict[type, tuple[tuple[int, int], ...]] = {}


def _fields_to_read(cls: type[Struct]) -> tuple[tuple[int, int], ...]:
    """The fields of a Struct class `_named_in` must look at, with what each may name: those whose name
    says producer id, group id or transactional id, and those that may hold records (a schema field of a
    primitive type never does). Worked out once per class: every field of every record was read before."""
    plan = _READ.get(cls)
    if plan is None:
        schema = cls._schema
        steps = []
        for i, name in enumerate(cls._fields):
            if name.endswith("producer_id"):
                steps.append((i, _PID))
            elif name.endswith("group_id"):
                steps.append((i, _GROUP))
            elif name.endswith("transactional_id"):
                steps.append((i, _TXN))
            elif schema is None or i >= len(schema) or not isinstance(schema[i].type, Primitive):
                steps.append((i, _NESTED))
        plan = _READ[cls] = tuple(steps)
    return plan


def fold_groups(touched: Iterable[Iterable[str]]) -> dict[str, str]:
    """Each key's group: keys touched by one event (`touched_keys`) fold together, and so, transitively,
    does everything linked to them. A group is named by its least key, prefixed with "@" so that it
    can never be mistaken for a key."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving: later look-ups of x go straight up
            x = parent[x]
        return x

    for keys in touched:
        first = None
        for key in keys:
            r = root(key)
            if first is None:
                first = r
            elif r != first:
                low, high = min(first, r), max(first, r)
                parent[high] = low
                first = low
    return {key: "@" + root(key) for key in parent}
