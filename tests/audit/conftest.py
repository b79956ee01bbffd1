"""A small wire for the audit's tests: builds real Exchange events with real Structs from the protocol
tables (fields outside the version's range hold Kafka's defaults, as the decoder gives them) and feeds
them to an Auditor, a few milliseconds apart."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from batch_header import batch_header

from ksniff.audit import AuditConfig, Auditor
from ksniff.audit.model import AuditOutput, Finding
from ksniff.decode.apis import BY_NAME
from ksniff.decode.events import ConnectionEnded, ConnectionLost, Exchange, ProducedBatch, RecordBatchHeader
from ksniff.decode.schema import Array, Field
from ksniff.decode.values import camel, default_of, struct_class

T0 = 1_700_000_000.0
BROKER = "10.0.0.5:9092"
APP1 = "10.0.0.11:50001"
APP2 = "10.0.0.12:50002"


def build(fields: tuple[Field, ...], name: str, version: int, values: dict[str, Any]):
    """A Struct of `fields` at `version`: given values where the field exists at that version."""
    unknown = set(values) - {f.name for f in fields}
    assert not unknown, f"{name} has no fields {unknown}"
    out = []
    for f in fields:
        if f.name in values and f.versions.contains(version):
            out.append(_convert(f.type, values[f.name], f.name, version))
        else:
            out.append(default_of(f))
    out.append(())
    return struct_class(fields, name)(out)


def _convert(t, value, name: str, version: int):
    if isinstance(t, Array):
        if isinstance(t.of, tuple):
            return tuple(build(t.of, camel(name), version, v) for v in value)
        return tuple(value)
    if isinstance(t, tuple):
        return build(t, camel(name), version, value)
    return value


def header(pid: int, epoch: int, seq: int, count: int, *, transactional: bool = False) -> RecordBatchHeader:
    return batch_header(pid, epoch, seq, count, transactional=transactional)


def commit_topics(offsets: dict, err: int) -> tuple[list[dict], dict]:
    """The `topics` of an offset commit (TxnOffsetCommit or OffsetCommit) of {(topic, partition): offset},
    and its answer with `err` for every partition."""
    topics: dict[str, list] = {}
    for (topic, p), off in offsets.items():
        topics.setdefault(topic, []).append((p, off))
    request = [
        {"name": t, "partitions": [{"partition_index": p, "committed_offset": o} for p, o in ps]}
        for t, ps in topics.items()
    ]
    answer = [
        {"name": t, "partitions": [{"partition_index": p, "error_code": err} for p, _ in ps]}
        for t, ps in topics.items()
    ]
    return request, {"topics": answer}


class Wire:
    def __init__(self, timeout_ms: int = 60000, key: str | None = None) -> None:
        self.auditor = Auditor(AuditConfig(txn_timeout_ms=timeout_ms), key=key)
        self.ts = T0
        self.correlation = itertools.count(1)
        self.findings: list[Finding] = []
        self.events: list = []

    def tick(self, seconds: float = 0.01) -> float:
        self.ts += seconds
        return self.ts

    def feed(self, event) -> list[Finding]:
        self.events.append(event)
        got = self.auditor.feed(event)
        self.findings.extend(got)
        return got

    def exchange(
        self,
        api: str,
        version: int,
        request: dict,
        response: dict | None,
        *,
        conn: int = 1,
        client: str = APP1,
        client_id: str = "app",
        status: str = "ok",
        unverified: bool = False,
        batches: tuple[ProducedBatch, ...] = (),
    ) -> Exchange:
        table = BY_NAME[api]
        ts = self.tick()
        return Exchange(
            conn=conn,
            client=client,
            broker=BROKER,
            api_key=table.key,
            api_name=api,
            api_version=version,
            correlation_id=next(self.correlation),
            client_id=client_id,
            request=build(table.request, api + "Request", version, request),
            response=None if response is None else build(table.response, api + "Response", version, response),
            request_ts=ts,
            request_end_ts=ts,
            response_ts=None if response is None else ts + 0.001,
            status=status,
            unverified=unverified,
            decode_error=None,
            batches=batches,
        )

    def send(self, *args, **kwargs) -> list[Finding]:
        return self.feed(self.exchange(*args, **kwargs))

    # -- producer and transaction APIs, with the broker's answer --

    def init(
        self,
        tid: str | None,
        pid: int,
        epoch: int,
        *,
        err: int = 0,
        timeout_ms: int = 60000,
        version: int = 4,
        req_pid: int = -1,
        req_epoch: int = -1,
        **kw,
    ) -> list[Finding]:
        return self.send(
            "InitProducerId",
            version,
            {
                "transactional_id": tid,
                "transaction_timeout_ms": timeout_ms,
                "producer_id": req_pid,
                "producer_epoch": req_epoch,
            },
            {
                "error_code": err,
                "producer_id": pid if err == 0 else -1,
                "producer_epoch": epoch if err == 0 else -1,
            },
            **kw,
        )

    def add_partitions(
        self,
        tid: str,
        pid: int,
        epoch: int,
        parts: list[tuple[str, int]],
        *,
        err: int = 0,
        version: int = 3,
        **kw,
    ) -> list[Finding]:
        topics: dict[str, list[int]] = {}
        for topic, p in parts:
            topics.setdefault(topic, []).append(p)
        return self.send(
            "AddPartitionsToTxn",
            version,
            {
                "v3_and_below_transactional_id": tid,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
            {
                "results_by_topic_v3_and_below": [
                    {
                        "name": t,
                        "results_by_partition": [
                            {"partition_index": p, "partition_error_code": err} for p in ps
                        ],
                    }
                    for t, ps in topics.items()
                ]
            },
            **kw,
        )

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str, *, err: int = 0, **kw) -> list[Finding]:
        return self.send(
            "AddOffsetsToTxn",
            3,
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group},
            {"error_code": err},
            **kw,
        )

    def txn_offset_commit(
        self,
        tid: str,
        pid: int,
        epoch: int,
        group: str,
        offsets: dict,
        *,
        err: int = 0,
        version: int = 3,
        **kw,
    ) -> list[Finding]:
        request, answer = commit_topics(offsets, err)
        return self.send(
            "TxnOffsetCommit",
            version,
            {
                "transactional_id": tid,
                "group_id": group,
                "producer_id": pid,
                "producer_epoch": epoch,
                "generation_id": 1,
                "member_id": "m-1",
                "topics": request,
            },
            answer,
            **kw,
        )

    def end_txn(
        self,
        tid: str,
        pid: int,
        epoch: int,
        *,
        commit: bool = True,
        err: int | None = 0,
        version: int = 3,
        new_pid: int = -1,
        new_epoch: int = -1,
        **kw,
    ) -> list[Finding]:
        response = (
            None if err is None else {"error_code": err, "producer_id": new_pid, "producer_epoch": new_epoch}
        )
        if err is None:
            kw.setdefault("status", "unanswered")
        return self.send(
            "EndTxn",
            version,
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
            response,
            **kw,
        )

    def produce(
        self,
        tid: str | None,
        pid: int,
        epoch: int,
        batches: list[tuple],
        *,
        version: int = 9,
        acks: int = -1,
        conn: int = 1,
        client: str = APP1,
        unverified: bool = False,
        status: str = "ok",
    ) -> list[Finding]:
        """batches: (topic, partition, base_sequence, records, error_code, base_offset)."""
        ts = self.ts + 0.01
        produced = tuple(
            ProducedBatch(
                ts=ts,
                response_ts=None if err is None else ts + 0.001,
                conn=conn,
                client=client,
                broker=BROKER,
                client_id="app",
                correlation_id=0,
                api_version=version,
                transactional_id=tid,
                acks=acks,
                topic=topic,
                partition=p,
                header=header(pid, epoch, seq, n, transactional=tid is not None),
                error_code=err,
                base_offset=off,
                unverified=unverified,
            )
            for topic, p, seq, n, err, off in batches
        )
        answered = [b for b in batches if b[4] is not None]
        response = {
            "responses": [
                {
                    "name": b[0],
                    "partition_responses": [
                        {"index": b[1], "error_code": b[4], "base_offset": b[5] if b[5] is not None else -1}
                    ],
                }
                for b in answered
            ]
        }
        if acks == 0:
            response, status = None, "no_response"
        elif not answered:
            response, status = None, "unanswered"
        ex = self.exchange(
            "Produce",
            version,
            {"transactional_id": tid, "acks": acks, "timeout_ms": 30000},
            response,
            conn=conn,
            client=client,
            unverified=unverified,
            status=status,
        )
        return self.feed(dataclasses.replace(ex, batches=produced))

    def offset_commit(
        self, group: str, offsets: dict, *, generation: int = 1, member: str = "m-1", err: int = 0, **kw
    ) -> list[Finding]:
        request, answer = commit_topics(offsets, err)
        return self.send(
            "OffsetCommit",
            8,
            {
                "group_id": group,
                "generation_id_or_member_epoch": generation,
                "member_id": member,
                "topics": request,
            },
            answer,
            **kw,
        )

    def markers(self, pid: int, epoch: int, commit: bool, parts: list[tuple[str, int]]) -> list[Finding]:
        return self.send(
            "WriteTxnMarkers",
            1,
            {
                "markers": [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "transaction_result": commit,
                        "topics": [{"name": t, "partition_indexes": [p]} for t, p in parts],
                        "coordinator_epoch": 0,
                    }
                ]
            },
            {
                "markers": [
                    {
                        "producer_id": pid,
                        "topics": [
                            {"name": t, "partitions": [{"partition_index": p, "error_code": 0}]}
                            for t, p in parts
                        ],
                    }
                ]
            },
            conn=99,
            client="10.0.0.5:40000",
        )

    def lost(self, conn: int = 1, client: str = APP1, length: int = 1000) -> list[Finding]:
        return self.feed(
            ConnectionLost(
                conn=conn,
                client=client,
                broker=BROKER,
                ts=self.tick(),
                offset=500,
                length=length,
                to_broker=True,
            )
        )

    def ended(self, conn: int = 1, reason: str = "fin", client: str = APP1) -> list[Finding]:
        return self.feed(
            ConnectionEnded(conn=conn, client=client, broker=BROKER, ts=self.tick(), reason=reason)
        )

    def finish(self, after: float = 0.0) -> AuditOutput:
        return self.auditor.finish(self.ts + after)

    def kinds(self, findings: list[Finding] | None = None) -> list[tuple[str, str]]:
        return [(f.kind, f.severity) for f in (self.findings if findings is None else findings)]


@pytest.fixture
def wire() -> Wire:
    return Wire()
