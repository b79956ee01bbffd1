"""Decode throughput: frames/s and MB/s over a synthetic stream of real-client-encoded Produce traffic,
or (`--api fetch`) of Fetch answers carrying the same batches back to a read_committed consumer.

Requests and responses are encoded by kafka-python (record batches by its record builder), cut
into MSS-sized chunks as the capture room would deliver them, and fed through the whole Decoder
(framing, headers, pairing, bodies, batch headers with CRC, a Fetch answer's partitions joined to its
request) with the compiled decoders and with the reference interpreter; then body decoding alone (the
bodies the traffic is heavy in: Produce requests, Fetch responses). Run by hand:

    python bench/bench_decode.py [--api produce|fetch] [--requests N] [--records-per-batch N]
                                 [--value-size BYTES] [--batches-per-fetch N]
"""

from __future__ import annotations

import argparse
import time

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from ksniff.capture.events import ConnectionClosed, ConnectionOpened, Endpoint, StreamChunk
from ksniff.decode import Decoder, compiled, interp
from ksniff.decode.apis import ALL_APIS

MSS = 1448
VERSION = 9  # what current Java clients send to Kafka 3.x/4.x brokers with idempotence
FETCH_VERSION = 12  # flexible, topics by name: what kafka-python 3 sends


def batch(sequence: int, records: int, value_size: int, codec: int) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=4000,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    value = bytes(range(256)) * (value_size // 256 + 1)
    for i in range(records):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value[:value_size], headers=[])
    return bytes(b.build())


def _encoded(n: int, client_id: str, exchange) -> tuple[list[bytes], list[bytes]]:
    """`n` exchanges, `exchange(correlation id)` -> (request, response), each framed with its header."""
    requests, responses = [], []
    for cid in range(n):
        req, resp = exchange(cid)
        req.with_header(correlation_id=cid, client_id=client_id)
        requests.append(bytes(req.encode(header=True, framed=True)))
        resp.with_header(correlation_id=cid)
        responses.append(bytes(resp.encode(header=True, framed=True)))
    return requests, responses


def traffic(
    n: int, records: int, value_size: int, partitions: int, codec: int
) -> tuple[list[bytes], list[bytes]]:
    T, R = ProduceRequest.TopicProduceData, ProduceResponse.TopicProduceResponse

    def exchange(cid: int):
        P, RP = T.PartitionProduceData, R.PartitionProduceResponse
        parts = [
            P(index=p, records=batch(cid * records, records, value_size, codec)) for p in range(partitions)
        ]
        req = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=30000,
            topic_data=[T(name="bulk", partition_data=parts)],
            version=VERSION,
        )
        resp = ProduceResponse(
            responses=[
                R(
                    name="bulk",
                    partition_responses=[
                        RP(index=p, error_code=0, base_offset=cid * records) for p in range(partitions)
                    ],
                )
            ],
            throttle_time_ms=0,
            version=VERSION,
        )
        return req, resp

    return _encoded(n, "producer-1", exchange)


def fetch_traffic(
    n: int, records: int, value_size: int, partitions: int, codec: int, per_fetch: int
) -> tuple[list[bytes], list[bytes]]:
    """`n` Fetch requests (read_committed) and their answers, each partition `per_fetch` batches."""
    FT, RT = FetchRequest.FetchTopic, FetchResponse.FetchableTopicResponse
    per = records * per_fetch

    def exchange(cid: int):
        FP, RP = FT.FetchPartition, RT.PartitionData
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=52428800,
            isolation_level=1,
            session_id=0,
            session_epoch=-1,
            topics=[
                FT(
                    topic="bulk",
                    partitions=[
                        FP(
                            partition=p,
                            current_leader_epoch=0,
                            fetch_offset=cid * per,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1048576,
                        )
                        for p in range(partitions)
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
            version=FETCH_VERSION,
        )
        starts = [cid * per + i * records for i in range(per_fetch)]
        data = b"".join(_at_offset(batch(start, records, value_size, codec), start) for start in starts)
        end = (n + 1) * per
        parts = [
            RP(
                partition_index=p,
                error_code=0,
                high_watermark=end,
                last_stable_offset=end,
                log_start_offset=0,
                aborted_transactions=[],
                preferred_read_replica=-1,
                records=data,
            )
            for p in range(partitions)
        ]
        resp = FetchResponse(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[RT(topic="bulk", partitions=parts)],
            version=FETCH_VERSION,
        )
        return req, resp

    return _encoded(n, "consumer-1", exchange)


def _at_offset(data: bytes, base_offset: int) -> bytes:
    """A batch as the broker serves it: its base offset set (outside the CRC, which starts at attributes)."""
    return base_offset.to_bytes(8, "big") + data[8:]


def events(requests: list[bytes], responses: list[bytes]) -> list:
    client, broker = Endpoint("10.0.0.1", 50000), Endpoint("10.0.0.2", 9092)
    out: list = [ConnectionOpened(1, client, broker, 0.0, True)]
    offsets = {True: 0, False: 0}
    ts = 0.0
    for req, resp in zip(requests, responses, strict=True):
        for from_src, data in ((True, req), (False, resp)):
            for i in range(0, len(data), MSS):
                piece = data[i : i + MSS]
                ts += 1e-5
                out.append(StreamChunk(1, from_src, offsets[from_src], piece, ts, ts))
                offsets[from_src] += len(piece)
    out.append(ConnectionClosed(1, ts, "fin"))
    return out


def run_decoder(evs: list, body_decoder) -> tuple[float, int]:
    dec = Decoder(body_decoder=body_decoder)
    start = time.perf_counter()
    batches = 0
    feed = dec.feed
    for ev in evs:
        for out in feed(ev):
            batches += len(getattr(out, "batches", ()))
            for part in getattr(out, "fetched", ()):
                batches += len(part.batches)
    dec.finish()
    return time.perf_counter() - start, batches


def bodies(frames: list[bytes], decode, fetch: bool) -> float:
    if fetch:  # responses: size, correlation id, empty tagged fields (header v1)
        api, version, is_request, offset = ALL_APIS[1], FETCH_VERSION, False, 4 + 4 + 1
    else:  # requests: size, header v2 with its empty tagged fields
        api, version, is_request, offset = ALL_APIS[0], VERSION, True, 4 + 10 + len("producer-1") + 1
    views = [memoryview(r)[offset:] for r in frames]
    start = time.perf_counter()
    for v in views:
        decode(api, version, is_request, v)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api", choices=("produce", "fetch"), default="produce")
    ap.add_argument(
        "--batches-per-fetch", type=int, default=8, help="batches per partition of a Fetch answer"
    )
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--records-per-batch", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=400)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--codec", type=int, default=0, help="0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    fetch = args.api == "fetch"
    if fetch:
        requests, responses = fetch_traffic(
            args.requests,
            args.records_per_batch,
            args.value_size,
            args.partitions,
            args.codec,
            args.batches_per_fetch,
        )
    else:
        requests, responses = traffic(
            args.requests, args.records_per_batch, args.value_size, args.partitions, args.codec
        )
    evs = events(requests, responses)
    frames = len(requests) + len(responses)
    size = sum(map(len, requests)) + sum(map(len, responses))
    what = f"Fetch v{FETCH_VERSION}" if fetch else f"Produce v{VERSION}"
    print(
        f"{len(requests)} {what} requests + responses: {frames} frames, {size / 1e6:.1f} MB, "
        f"{len(evs)} chunks of <= {MSS} bytes"
    )
    print(f"{'path':<34} {'seconds':>8} {'frames/s':>10} {'MB/s':>8} {'chunks/s':>10}")
    for name, decode in (
        ("Decoder, compiled bodies", compiled.decode_body),
        ("Decoder, interpreted bodies", interp.decode_body),
    ):
        best = min(run_decoder(evs, decode)[0] for _ in range(args.repeat))
        print(
            f"{name:<34} {best:8.3f} {frames / best:10.0f} {size / best / 1e6:8.1f} {len(evs) / best:10.0f}"
        )
    heavy = responses if fetch else requests
    heavy_size = sum(map(len, heavy))
    kind = "response" if fetch else "request"
    for name, decode in (
        (f"{kind} bodies only, compiled", compiled.decode_body),
        (f"{kind} bodies only, interpreted", interp.decode_body),
    ):
        best = min(bodies(heavy, decode, fetch) for _ in range(args.repeat))
        print(f"{name:<34} {best:8.3f} {len(heavy) / best:10.0f} {heavy_size / best / 1e6:8.1f} {'':>10}")


if __name__ == "__main__":
    main()
