"""Decode throughput: frames/s and MB/s over a synthetic stream of real-client-encoded Produce traffic.

Produce requests and responses are encoded by kafka-python (record batches by its record builder), cut
into MSS-sized chunks as the capture room would deliver them, and fed through the whole Decoder
(framing, headers, pairing, bodies, batch headers with CRC) with the compiled decoders and with the
reference interpreter; then body decoding alone. Run by hand:

    python bench/bench_decode.py [--requests N] [--records-per-batch N] [--value-size BYTES]
"""

from __future__ import annotations

import argparse
import time

from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from ksniff.capture.events import ConnectionClosed, ConnectionOpened, Endpoint, StreamChunk
from ksniff.decode import Decoder, compiled, interp
from ksniff.decode.apis import ALL_APIS

MSS = 1448
VERSION = 9  # what current Java clients send to Kafka 3.x/4.x brokers with idempotence


def batch(sequence: int, records: int, value_size: int, codec: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=4000,
                                  producer_epoch=0, base_sequence=sequence, batch_size=1 << 30)
    value = bytes(range(256)) * (value_size // 256 + 1)
    for i in range(records):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value[:value_size], headers=[])
    return bytes(b.build())


def traffic(n: int, records: int, value_size: int, partitions: int, codec: int
            ) -> tuple[list[bytes], list[bytes]]:
    T = ProduceRequest.TopicProduceData
    P = T.PartitionProduceData
    R = ProduceResponse.TopicProduceResponse
    RP = R.PartitionProduceResponse
    requests, responses = [], []
    for cid in range(n):
        parts = [P(index=p, records=batch(cid * records, records, value_size, codec))
                 for p in range(partitions)]
        req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000,
                             topic_data=[T(name="bulk", partition_data=parts)], version=VERSION)
        req.with_header(correlation_id=cid, client_id="producer-1")
        requests.append(bytes(req.encode(header=True, framed=True)))
        resp = ProduceResponse(responses=[R(name="bulk", partition_responses=[
            RP(index=p, error_code=0, base_offset=cid * records) for p in range(partitions)])],
            throttle_time_ms=0, version=VERSION)
        resp.with_header(correlation_id=cid)
        responses.append(bytes(resp.encode(header=True, framed=True)))
    return requests, responses


def events(requests: list[bytes], responses: list[bytes]) -> list:
    client, broker = Endpoint("10.0.0.1", 50000), Endpoint("10.0.0.2", 9092)
    out: list = [ConnectionOpened(1, client, broker, 0.0, True)]
    offsets = {True: 0, False: 0}
    ts = 0.0
    for req, resp in zip(requests, responses, strict=True):
        for from_src, data in ((True, req), (False, resp)):
            for i in range(0, len(data), MSS):
                piece = data[i:i + MSS]
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
    dec.finish()
    return time.perf_counter() - start, batches


def bodies(requests: list[bytes], decode) -> float:
    api = ALL_APIS[0]
    offset = 4 + 10 + len("producer-1") + 1  # size, header v2 with its empty tagged fields
    views = [memoryview(r)[offset:] for r in requests]
    start = time.perf_counter()
    for v in views:
        decode(api, VERSION, True, v)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--records-per-batch", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=400)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--codec", type=int, default=0, help="0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    requests, responses = traffic(args.requests, args.records_per_batch, args.value_size, args.partitions,
                                  args.codec)
    evs = events(requests, responses)
    frames = len(requests) + len(responses)
    size = sum(map(len, requests)) + sum(map(len, responses))
    print(f"{len(requests)} Produce v{VERSION} requests + responses: {frames} frames, {size / 1e6:.1f} MB, "
          f"{len(evs)} chunks of <= {MSS} bytes")
    print(f"{'path':<34} {'seconds':>8} {'frames/s':>10} {'MB/s':>8} {'chunks/s':>10}")
    for name, decode in (("Decoder, compiled bodies", compiled.decode_body),
                         ("Decoder, interpreted bodies", interp.decode_body)):
        best = min(run_decoder(evs, decode)[0] for _ in range(args.repeat))
        print(f"{name:<34} {best:8.3f} {frames / best:10.0f} {size / best / 1e6:8.1f} "
              f"{len(evs) / best:10.0f}")
    req_size = sum(map(len, requests))
    for name, decode in (("request bodies only, compiled", compiled.decode_body),
                         ("request bodies only, interpreted", interp.decode_body)):
        best = min(bodies(requests, decode) for _ in range(args.repeat))
        print(f"{name:<34} {best:8.3f} {len(requests) / best:10.0f} {req_size / best / 1e6:8.1f} {'':>10}")


if __name__ == "__main__":
    main()
