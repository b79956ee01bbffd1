"""The TPACKET_V3 receive ring of a live capture socket: the kernel writes packets into shared memory.

The ring is `blocks` blocks of `block_size` bytes, mapped into this process. The kernel fills one block
after another with packets (each a `tpacket3_hdr`, a `sockaddr_ll`, then the frame) and hands a block to
us when it is full or when `RETIRE_MS` have passed since its first packet, so a quiet link still
delivers within a fraction of a second. We copy a handed-over block's packets out as pcap records and
give the block back at once; the frames cannot stay views of the ring. When every block is ours the
kernel drops, and counts each drop in `tpacket_stats_v3`.

`block_records` is the reference copy; `ksniff.capture._fastwalk.ring_block` is the compiled one (same
output, held equal by a test), used when built.
"""

from __future__ import annotations

import mmap
import socket
import struct

from ksniff.capture import compiled

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_STATISTICS = 6
PACKET_VERSION = 10
TPACKET_V3 = 2
TP_STATUS_USER = 1
RETIRE_MS = 50  # a block is handed over at the latest this long after its first packet
# tpacket_block_desc: version, offset_to_priv, then tpacket_hdr_v1: block_status, num_pkts,
# offset_to_first_pkt, ...
BLOCK_STATUS, BLOCK_PACKETS, BLOCK_FIRST = 8, 12, 16
# tpacket3_hdr: tp_next_offset, tp_sec, tp_nsec, tp_snaplen, tp_len, tp_status, tp_mac, tp_net, ...
_HDR = struct.Struct("=IIIIIIH")
HDR_LEN = 48  # TPACKET_ALIGN(sizeof(struct tpacket3_hdr)); the packet's sockaddr_ll follows
HDR_HATYPE = HDR_LEN + 8  # sockaddr_ll.sll_hatype
HDR_PKTTYPE = HDR_LEN + 10  # sockaddr_ll.sll_pkttype
HDR_END = HDR_LEN + 20  # the end of the sockaddr_ll
PACKET_OUTGOING = 4
ARPHRD_LOOPBACK = 772
RING_LAYOUT = (
    BLOCK_PACKETS,
    BLOCK_FIRST,
    HDR_LEN,
    HDR_HATYPE,
    HDR_PKTTYPE,
    HDR_END,
    PACKET_OUTGOING,
    ARPHRD_LOOPBACK,
)
_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")
_RECORD = struct.Struct("=IIII").pack
PCAP_NS_MAGIC = 0xA1B23C4D  # the records' pcap header: nanosecond timestamps


def pcap_header(snaplen: int, linktype: int) -> bytes:
    """The file header of the ring's pcap bytes: nanosecond timestamps, this machine's byte order."""
    return struct.pack("=IHHiIII", PCAP_NS_MAGIC, 2, 4, 0, 0, snaplen, linktype)


def block_records(
    ring, block: int, size: int, skip_outgoing: bool, limit: int, head: bytes
) -> tuple[bytes, int, int]:
    """The packets of the ring block at `block` (`size` bytes) as a pcap file in memory: `head` (the
    file header), then a record per packet (seconds, nanoseconds, captured and wire length, then the
    frame), at most `limit`, leaving out the copies of packets leaving through a loopback device (seen
    again as they arrive) when `skip_outgoing`. Returns (the pcap bytes, packets copied, packets left
    out)."""
    if block < 0 or block + size > len(ring) or size < HDR_END:
        raise ValueError("ring block out of range")
    n = _U32.unpack_from(ring, block + BLOCK_PACKETS)[0]
    p = _U32.unpack_from(ring, block + BLOCK_FIRST)[0]
    parts: list[bytes] = [head]
    kept = skipped = 0
    for _ in range(n):
        if p < HDR_LEN or p + HDR_END > size:
            break
        h = block + p
        nxt, sec, nsec, snap, wire, _status, mac = _HDR.unpack_from(ring, h)
        if mac + snap > size - p or kept == limit:
            break
        if (
            skip_outgoing
            and ring[h + HDR_PKTTYPE] == PACKET_OUTGOING
            and _U16.unpack_from(ring, h + HDR_HATYPE)[0] == ARPHRD_LOOPBACK
        ):
            skipped += 1
        else:
            kept += 1
            parts.append(_RECORD(sec, nsec, snap, wire))
            parts.append(ring[h + mac : h + mac + snap])
        if nxt == 0:
            break
        p += nxt
    return b"".join(parts), kept, skipped


class RxRing:
    """The mapped ring of `sock` (an AF_PACKET socket, not yet bound). Raises OSError when the kernel
    refuses it (no TPACKET_V3 before Linux 3.2, or no memory for the blocks)."""

    def __init__(self, sock: socket.socket, block_size: int, blocks: int) -> None:
        self.block_size, self.blocks = block_size, blocks
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
        # tpacket_req3: block size, blocks, frame size, frames (fixed by the first two in V3), the
        # retire timeout, private bytes per block, features.
        frame = 1 << 11
        req = struct.pack("7I", block_size, blocks, frame, block_size // frame * blocks, RETIRE_MS, 0, 0)
        sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)
        try:
            self.map = mmap.mmap(
                sock.fileno(), block_size * blocks, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except OSError:
            sock.setsockopt(SOL_PACKET, PACKET_RX_RING, bytes(28))  # no blocks: the ring freed again
            raise
        self._sock = sock
        self._next = 0  # the block the kernel hands over next
        walk = compiled.fastwalk
        self._copy = walk.ring_block if walk is not None else block_records

    def ready(self) -> bool:
        """Whether the kernel has handed over the next block."""
        status = _U32.unpack_from(self.map, self._next * self.block_size + BLOCK_STATUS)[0]
        return bool(status & TP_STATUS_USER)

    def take(self, skip_outgoing: bool, limit: int, head: bytes) -> tuple[bytes, int, int]:
        """The next handed-over block's packets as a pcap file (see `block_records`); the block goes
        back to the kernel before this returns. Call only when `ready()`."""
        off = self._next * self.block_size
        try:
            return self._copy(self.map, off, self.block_size, skip_outgoing, limit, head)
        finally:
            _U32.pack_into(self.map, off + BLOCK_STATUS, 0)  # TP_STATUS_KERNEL: the kernel's again
            self._next = (self._next + 1) % self.blocks

    def kernel_counts(self) -> tuple[int, int, int]:
        """(packets, drops, times the ring was full) since the last call: tpacket_stats_v3, which the
        kernel resets on each read. Its packets include the drops."""
        try:
            return struct.unpack("III", self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12))
        except OSError:
            return 0, 0, 0

    def close(self) -> None:
        self.map.close()
