"""Idempotence asked for and not in effect: `idempotence_not_in_effect`.

What the wire can prove: a client sent InitProducerId (only a client configured for idempotence or
transactions sends it), the broker refused it (an error, or producer id -1 in the answer), and later
the same client (the same client id from the same host; without a client id, the same connection) wrote
record batches with producer id -1, which the broker cannot deduplicate. Sarama 1.22 does exactly this:
it reads the producer id from InitProducerId's answer without looking at its error code.

What it cannot: a client that never sent InitProducerId and writes with producer id -1 is an ordinary
non-idempotent producer, whatever its configuration said; it is never flagged. Nor is a client whose
InitProducerId got no answer (the capture or the connection ended first): what it was told is unknown.
A later InitProducerId that the broker grants (a producer id >= 0) clears the client.

The watch runs where the partition logs are kept (the whole fold, or the context group of a partitioned
run, which is given every Produce and InitProducerId: keys.LOG_APIS), so each finding is made once.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ksniff.audit.codes import error_name
from ksniff.audit.findings import exchange_evidence, make
from ksniff.audit.model import Finding, FindingKind, Severity
from ksniff.common.frozen import slotted_dataclass
from ksniff.decode.events import Exchange


@slotted_dataclass
class Refused:
    """A client's refused InitProducerId, waiting for a write with producer id -1."""

    evidence: dict[str, Any]
    unverified: bool
    reported: bool = False


@slotted_dataclass
class IdempotenceWatch:
    """What the idempotence check remembers between exchanges: each client's refused InitProducerId."""

    refused: dict[tuple[str, str], Refused] = field(default_factory=dict)


def client_key(ex: Exchange) -> tuple[str, str]:
    """Who the client is across its connections: its host and client id (a Kafka client opens one
    connection per broker, and often sends InitProducerId on another one than its writes); without a
    client id, its connection's address."""
    if ex.client_id:
        return ex.client.rsplit(":", 1)[0], ex.client_id
    return ex.client, ""


def on_exchange(watch: IdempotenceWatch, ex: Exchange, out: list[Finding]) -> None:
    if ex.request is None:
        return
    api = ex.api_name
    if api == "InitProducerId":
        _on_init(watch, ex)
    elif api == "Produce" and watch.refused:
        _on_produce(watch, ex, out)


def _on_init(watch: IdempotenceWatch, ex: Exchange) -> None:
    resp = ex.response
    if resp is None:
        return  # no answer seen: what the client was told is unknown
    key = client_key(ex)
    if resp.error_code == 0 and resp.producer_id >= 0:
        watch.refused.pop(key, None)  # granted: the client has a producer id now
        return
    if key in watch.refused and not watch.refused[key].reported:
        return  # the first refusal is the evidence
    evidence = {
        "init_api": f"{ex.api_name} v{ex.api_version}",
        "init_ts": ex.request_ts,
        "init_client": ex.client,
        "init_broker": ex.broker,
        "init_conn": ex.conn,
        "init_correlation_id": ex.correlation_id,
        "init_error": error_name(resp.error_code),
        "init_error_code": resp.error_code,
        "init_producer_id": resp.producer_id,
        "transactional_id": ex.request.transactional_id or None,
    }
    watch.refused[key] = Refused(evidence, ex.unverified)


def _on_produce(watch: IdempotenceWatch, ex: Exchange, out: list[Finding]) -> None:
    r = watch.refused.get(client_key(ex))
    if r is None or r.reported:
        return
    plain = [
        b
        for b in ex.batches
        if not b.header.control and b.header.producer_id < 0 and b.header.crc_ok is not False
    ]
    if not plain:
        return
    r.reported = True
    b = plain[0]
    init = r.evidence
    evidence = exchange_evidence(ex, b.error_code)
    evidence.update(init)
    evidence.update(
        write_ts=ex.request_ts,
        topic=b.topic,
        partition=b.partition,
        records=b.header.records_count,
        producer_id=b.header.producer_id,
        base_sequence=b.header.base_sequence,
        acks=getattr(ex.request, "acks", None),
        partitions=sorted({f"{x.topic}-{x.partition}" for x in plain}),
    )
    refusal = f"answered {init['init_error']}" if init["init_error_code"] else "answered no error"
    refusal += f" with producer id {init['init_producer_id']}"
    host = ex.client.rsplit(":", 1)[0]
    who = f"client {ex.client_id!r} at {host}" if ex.client_id else f"client {ex.client}"
    out.append(
        make(
            FindingKind.IDEMPOTENCE_NOT_IN_EFFECT,
            Severity.WARNING,
            ex.request_ts,
            f"{who} asked for idempotence ({init['init_api']} {refusal}) and then wrote "
            f"{b.topic}-{b.partition} with producer id -1 ({broker_word(b.error_code)}): "
            "the broker cannot deduplicate its retries",
            evidence,
            unverified=r.unverified or ex.unverified,
            topic=b.topic,
            partition=b.partition,
            transactional_id=init["transactional_id"],
        )
    )


def broker_word(code: int | None) -> str:
    if code is None:
        return "no answer"
    return "accepted" if code == 0 else f"answered {error_name(code)}"
