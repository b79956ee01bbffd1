"""Live capture from a Linux interface: a raw AF_PACKET socket with the BPF filter in the kernel.

`open_live` returns a run shaped like the file run (iterate for events; `stats`, `inputs`, `warnings`,
`drop`) plus `stop()`, callable from another thread or a signal handler. Reading never blocks for long,
so a stop, the duration or the packet count end the capture within a fraction of a second; what the
kernel already queued is still read. Kernel drops come from PACKET_STATISTICS. The interface `any`
captures IP packets of all interfaces (without link headers, so it is recorded as link type RAW).

Packets come through the socket's TPACKET_V3 ring (`ksniff.capture.ring`): a thread does nothing but
copy each block the kernel hands over out of the ring, as pcap records, into a backlog of at most
`BACKLOG` bytes, and the iterating thread walks those records as a pcap file's (the same walk, compiled
or not) into segments. When the backlog is full the copying waits, the ring fills and the kernel drops
and counts. Where the ring cannot be set up (an old kernel, no memory for it) or `KSNIFF_LIVE_RING=0`,
one recvfrom per packet reads the socket's queue instead, and a warning says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator

from ksniff.capture.errors import CaptureError, CaptureLimits
from ksniff.capture.events import CaptureStats, InputInfo, StreamEvent
from ksniff.capture.packets import CUT_SHORT, DAMAGED, FRAGMENT, TICK, linktype_name, parse_frame
from ksniff.capture.pcap import PcapHeader, pcap_segments
from ksniff.capture.reassembly import Reassembler, hot_loop
from ksniff.capture.ring import RETIRE_MS, RxRing, pcap_header
from ksniff.capture.walk import WalkCounts

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4
PACKET_IGNORE_OUTGOING = 23
SNAPLEN = 262144
RCVBUF = 64 << 20  # the kernel queue that absorbs bursts while we parse
POLL = 0.1  # seconds between checks of stop, duration and idle flushing
LINK_ETHERNET, LINK_RAW = 1, 101
_ARPHRD_ETHER, _ARPHRD_LOOPBACK = 1, 772
RING_ENV = "KSNIFF_LIVE_RING"  # "0": the recvfrom loop instead of the ring
RING_BLOCK = 2 << 20  # bytes per ring block
RING_BLOCKS = 16  # 32 MiB of ring: what the kernel can fill while the copying thread waits for the GIL
BACKLOG = 64 << 20  # bytes copied out of the ring and not yet parsed, at most
PCAP_HEADER_LEN = 24
# The ring's pcap magic as the walk reads it (little-endian), whatever this machine's byte order.
PCAP_NS_MAGIC_LE = struct.unpack("<I", struct.pack("=I", 0xA1B23C4D))[0]


class LiveRun:
    """A live capture; iterate for events until it stops. Iterating again resumes where it left off."""

    def __init__(
        self,
        iface: str,
        bpf: str | None,
        count: int | None,
        duration: float | None,
        write_path: str | None,
        limits: CaptureLimits | None,
        ring: tuple[int, int] | None,
        backlog: int,
    ) -> None:
        self.iface = iface
        self.stats = CaptureStats()
        self.reassembler = Reassembler(limits, self.stats)
        self.warnings: list[str] = []
        self.bytes_total = 0
        self.bytes_read = 0
        self._count, self._duration = count, duration
        self._stop = threading.Event()
        self._finished = False
        self._sock, self.linktype = _open_socket(iface, bpf)
        self._ring: RxRing | None = None
        self._copier: threading.Thread | None = None
        self.ring_freezes = 0  # times the kernel found the ring full (then dropped until a block came back)
        if ring is not None:
            try:
                self._ring = RxRing(self._sock, *ring)
            except OSError as exc:
                self.warnings.append(
                    f"{iface}: no capture ring ({exc.strerror or exc}); reading one packet per call"
                )
        _discard_queued(self._sock)
        # What the kernel dropped before the filter was attached (the whole host's traffic into a small
        # default queue) is not this capture's: reading the counters resets them.
        with contextlib.suppress(OSError):
            self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)
        self._writer = None
        if write_path is not None:
            try:
                self._writer = open(write_path, "wb")  # noqa: SIM115 - open for the whole capture
            except OSError as exc:
                self._close_capture()
                raise CaptureError(f"{write_path}: {exc.strerror or exc}") from None
            if self._ring is not None:  # the ring's records: nanoseconds, this machine's byte order
                self._writer.write(pcap_header(SNAPLEN, self.linktype))
            else:
                self._writer.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, self.linktype))
        self._started = time.monotonic()
        if self._ring is not None:
            self._backlog = _Backlog(backlog)
            self._copier = threading.Thread(target=self._copy_out, name="ksniff-ring", daemon=True)
            self._copier.start()

    @property
    def inputs(self) -> list[InputInfo]:
        return [
            InputInfo(self.iface, "live", linktype_name(self.linktype), self.stats.packets, self.bytes_read)
        ]

    @property
    def uses_ring(self) -> bool:
        """Whether packets come through the TPACKET_V3 ring (else one recvfrom each)."""
        return self._ring is not None

    def stop(self) -> None:
        """End the capture soon; safe from any thread and from signal handlers."""
        self._stop.set()

    def drop(self, conn_id: int) -> None:
        self.reassembler.drop(conn_id)

    def __iter__(self) -> Iterator[StreamEvent]:
        return self._events()

    def _events(self) -> Iterator[StreamEvent]:
        r = self.reassembler
        if self._ring is not None and hot_loop() is not None:
            # The ring's blocks are walked by the compiled file walk: its batches go to the hot loop.
            yield from r.batch_events(self._ring_segments(batched=True), finish=False)
        else:
            segments = self._ring_segments() if self._ring is not None else self._segments()
            yield from r.events(segments, finish=False)
        if not self._finished:
            self._finished = True
            r.finish()
            self._close()
            while r.out:
                yield r.out.popleft()

    # ------------------------------------------------------------------ the ring

    def _copy_out(self) -> None:
        """The copying thread: each block the kernel hands over, copied out into the backlog at once."""
        ring, backlog = self._ring, self._backlog
        # Loopback's leaving copies are left out as in _loopback_outgoing (on `lo` since Linux 4.20 the
        # kernel does not even put them in the ring; on `any` it does).
        skip, left = True, self._count if self._count is not None else -1
        head = pcap_header(SNAPLEN, self.linktype)
        poller = select.poll()
        poller.register(self._sock, select.POLLIN | select.POLLERR)
        counted = time.monotonic()
        try:
            while left and not self._should_stop():
                if time.monotonic() - counted >= POLL:
                    self._read_ring_counts()
                    counted = time.monotonic()
                if not ring.ready():
                    if self._socket_failed(poller.poll(POLL * 1000)):
                        return
                    continue
                if not backlog.wait_for_room(POLL):
                    continue  # the parsing is behind: the ring fills meanwhile, then the kernel drops
                records, n, _ = ring.take(skip, left, head)
                left -= n
                backlog.put(records, n)
            # Stopped: what the kernel holds, and the block it is filling (handed over within RETIRE_MS).
            # At most one ring's worth, so traffic that goes on cannot hold the stop up.
            deadline = time.monotonic() + 2 * RETIRE_MS / 1000
            taken = 0
            while left and taken <= ring.blocks:
                if ring.ready():
                    if backlog.wait_for_room(POLL):
                        records, n, _ = ring.take(skip, left, head)
                        left -= n
                        taken += 1
                        backlog.put(records, n)
                elif time.monotonic() >= deadline or self._socket_failed(poller.poll(RETIRE_MS)):
                    break
        finally:
            backlog.close()

    def _socket_failed(self, polled: list) -> bool:
        if polled and polled[0][1] & select.POLLERR:  # the interface went away
            code = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            self.warnings.append(f"{self.iface}: capture ended: {os.strerror(code) if code else 'error'}")
            self._stop.set()
            return True
        return False

    def _ring_segments(self, batched: bool = False) -> Iterator:
        """The backlog's records walked into segments; a TICK when none came for a while. With
        `batched`, in lists (the walk's batches, a TICK alone), for `Reassembler.batch_events`."""
        backlog, writer, stats = self._backlog, self._writer, self.stats
        while True:
            self._should_stop()  # the copying thread sees the duration end too, even while this is busy
            records = backlog.get(POLL)
            if records is None:
                tick = (time.time(), b"", 0, b"", 0, 0, 0, TICK, b"")
                yield [tick] if batched else tick
                continue
            if records is _END:
                return
            if len(records) <= PCAP_HEADER_LEN:
                continue
            if writer is not None:
                writer.write(memoryview(records)[PCAP_HEADER_LEN:])
            counts = WalkCounts()
            chunk = _InMemory(records)
            yield from pcap_segments(
                chunk, PcapHeader(chunk, PCAP_NS_MAGIC_LE), counts, self.warnings, batched
            )
            stats.packets += counts.packets
            # the frames, without the headers of the file and of each record
            self.bytes_read += len(records) - PCAP_HEADER_LEN - 16 * counts.packets
            stats.non_tcp_packets += counts.non_tcp
            stats.ip_fragments += counts.fragments
            stats.truncated_packets += counts.cut_short
            stats.damaged_packets += counts.damaged_headers
            stats.tcp_segments += (
                counts.packets - counts.non_tcp - counts.fragments - counts.cut_short - counts.damaged_headers
            )
            if stats.first_ts is None:
                stats.first_ts = counts.first_ts
            stats.last_ts = counts.last_ts

    def _read_ring_counts(self) -> None:
        _packets, drops, freezes = self._ring.kernel_counts()  # reset by the kernel on each read
        self.stats.kernel_drops += drops
        self.ring_freezes += freezes

    # ------------------------------------------------------------------ one recvfrom per packet

    def _segments(self) -> Iterator[tuple]:
        """Segments as they arrive, and a TICK now and then so merged chunks go out when traffic pauses."""
        sock, link, stats = self._sock, self.linktype, self.stats
        skip_outgoing = self._loopback_outgoing
        while not self._finished:
            if self._should_stop():
                yield from self._drain_queue()
                return
            try:
                data, addr = sock.recvfrom(SNAPLEN)
            except BlockingIOError:
                select.select([sock], [], [], POLL)
                now = time.time()
                self._read_kernel_drops()
                yield (now, b"", 0, b"", 0, 0, 0, TICK, b"")
                continue
            except OSError as exc:  # the interface went away
                self.warnings.append(f"{self.iface}: capture ended: {exc.strerror or exc}")
                self._stop.set()
                continue
            if skip_outgoing(addr):
                continue
            seg = self._packet(time.time(), data, link, stats)
            if seg is not None:
                yield seg

    def _drain_queue(self) -> Iterator[tuple]:
        """After a stop: what the kernel already holds, without waiting for more."""
        while True:
            try:
                data, addr = self._sock.recvfrom(SNAPLEN)
            except OSError:
                return
            if not self._loopback_outgoing(addr):
                seg = self._packet(time.time(), data, self.linktype, self.stats)
                if seg is not None:
                    yield seg

    def _packet(self, ts: float, data: bytes, link: int, stats: CaptureStats):
        stats.packets += 1
        self.bytes_read += len(data)
        if stats.first_ts is None:
            stats.first_ts = ts
        stats.last_ts = ts
        if self._writer is not None:
            usec = int(ts * 1e6)
            n = len(data)
            self._writer.write(struct.pack("<IIII", usec // 1_000_000, usec % 1_000_000, n, n) + data)
        if self._count is not None and stats.packets >= self._count:
            self._stop.set()
        seg = parse_frame(ts, memoryview(data), 0, len(data), link)
        if seg.__class__ is tuple:
            stats.tcp_segments += 1
            return seg
        if seg == FRAGMENT:
            stats.ip_fragments += 1
        elif seg == CUT_SHORT:
            stats.truncated_packets += 1
        elif seg == DAMAGED:
            stats.damaged_packets += 1
        else:
            stats.non_tcp_packets += 1
        return None

    def _loopback_outgoing(self, addr) -> bool:
        # On loopback every packet is seen leaving and arriving; keep one copy, as libpcap does.
        return addr[2] == PACKET_OUTGOING and addr[3] == _ARPHRD_LOOPBACK

    def _should_stop(self) -> bool:
        if self._duration is not None and time.monotonic() - self._started >= self._duration:
            self._stop.set()
        return self._stop.is_set()

    def _read_kernel_drops(self) -> None:
        try:
            _packets, drops = struct.unpack("II", self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        except OSError:
            return
        self.stats.kernel_drops += drops  # the kernel resets its counters on each read

    def _close_capture(self) -> None:
        """The copying thread ended (it reads the ring until then), the ring unmapped, the socket shut."""
        if self._copier is not None:
            self._stop.set()
            self._copier.join()
        if self._ring is not None:
            self._read_ring_counts()
            self._ring.close()
        else:
            self._read_kernel_drops()
        self._sock.close()

    def _close(self) -> None:
        self._close_capture()
        if self._writer is not None:
            self._writer.close()
        self.warnings.extend(self.reassembler.warnings())
        if self.stats.kernel_drops:
            full = f" (its capture ring was full {self.ring_freezes} times)" if self.ring_freezes else ""
            self.warnings.append(f"{self.iface}: the kernel dropped {self.stats.kernel_drops} packets{full}")


_END = object()  # the backlog's end: the copying thread has stopped


class _Backlog:
    """Records copied out of the ring and not yet parsed, at most `cap` bytes (one block more at worst)."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._items: deque[bytes] = deque()
        self._bytes = 0
        self._closed = False
        self._cond = threading.Condition()

    def wait_for_room(self, timeout: float) -> bool:
        with self._cond:
            if self._bytes >= self._cap:
                self._cond.wait(timeout)
            return self._bytes < self._cap

    def put(self, records: bytes, _packets: int) -> None:
        with self._cond:
            self._items.append(records)
            self._bytes += len(records)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def get(self, timeout: float):
        """The oldest records; None when none came within `timeout`; _END when there will be no more."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            if self._items:
                records = self._items.popleft()
                self._bytes -= len(records)
                self._cond.notify_all()
                return records
            return _END if self._closed else None


class _InMemory:
    """The ring's pcap bytes of one block, served to the pcap walk like a capture file's."""

    def __init__(self, records: bytes) -> None:
        self.buf, self.end, self.parsed = records, len(records), 0

    def more(self, _pos: int) -> None:
        return None  # whole records only

    def truncated(self, pos: int) -> str:
        return f"capture ring: a record cut at byte {pos}"

    def corrupt(self, pos: int, what: str) -> str:
        return f"capture ring: {what} at byte {pos}"


def _open_socket(iface: str, bpf: str | None) -> tuple[socket.socket, int]:
    any_iface = iface == "any"
    kind = socket.SOCK_DGRAM if any_iface else socket.SOCK_RAW
    try:
        sock = socket.socket(socket.AF_PACKET, kind, socket.htons(ETH_P_ALL))
    except PermissionError:
        raise CaptureError(f"{iface}: no permission to capture (needs root or CAP_NET_RAW)") from None
    except (OSError, AttributeError) as exc:
        raise CaptureError(f"{iface}: cannot open a capture socket ({exc})") from None
    try:
        link = LINK_RAW if any_iface else _linktype(iface)
        if bpf:
            _attach_filter(sock, bpf, link)
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE: beyond rmem_max as root
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        if not any_iface:  # unbound, the socket sees every interface (Python cannot bind to index 0)
            sock.bind((iface, 0))
        if link == LINK_ETHERNET and _arphrd(iface) == _ARPHRD_LOOPBACK:
            # Loopback shows each packet twice (leaving and arriving). Without the leaving copies the
            # kernel queues half as much, and its drop counter counts only packets we would keep.
            with contextlib.suppress(OSError):  # before Linux 4.20: _loopback_outgoing skips them
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        sock.setblocking(False)
    except CaptureError:
        sock.close()
        raise
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ENODEV, errno.ENXIO):
            raise CaptureError(f"{iface}: no such interface") from None
        raise CaptureError(f"{iface}: cannot capture ({exc.strerror or exc})") from None
    return sock, link


def _arphrd(iface: str) -> int:
    try:
        with open(f"/sys/class/net/{iface}/type") as f:
            return int(f.read())
    except (OSError, ValueError):
        raise CaptureError(f"{iface}: no such interface") from None


def _linktype(iface: str) -> int:
    arphrd = _arphrd(iface)
    if arphrd not in (_ARPHRD_ETHER, _ARPHRD_LOOPBACK):
        raise CaptureError(f"{iface}: unsupported link type (ARPHRD {arphrd}); try the interface 'any'")
    return LINK_ETHERNET


def _attach_filter(sock: socket.socket, bpf: str, link: int) -> None:
    try:
        from scapy.arch.common import compile_filter
        from scapy.error import Scapy_Exception

        program = compile_filter(bpf, linktype=12 if link == LINK_RAW else link)  # 12: DLT_RAW in libpcap
    except ImportError as exc:
        raise CaptureError(f"cannot compile the capture filter: {exc}") from None
    except (Scapy_Exception, OSError) as exc:
        raise CaptureError(f"bad capture filter {bpf!r}: {str(exc).splitlines()[0]}") from None
    fprog = struct.pack("HL", program.bf_len, ctypes.addressof(program.bf_insns.contents))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def _discard_queued(sock: socket.socket) -> None:
    """Packets that arrived between socket() and the filter being attached (or the ring being set up)
    would bypass them."""
    while True:
        try:
            sock.recv(1)
        except OSError:
            return


def open_live(
    iface: str,
    bpf: str | None = None,
    count: int | None = None,
    duration: float | None = None,
    write_path: str | None = None,
    limits: CaptureLimits | None = None,
    *,
    ring: tuple[int, int] | None = (RING_BLOCK, RING_BLOCKS),
    backlog: int = BACKLOG,
) -> LiveRun:
    """Start capturing on `iface`; raises CaptureError (one line) when that is not possible.

    `ring`: (block size, blocks) of the TPACKET_V3 ring, None for one recvfrom per packet (also when
    KSNIFF_LIVE_RING=0); `backlog`: bytes copied out of the ring and not yet parsed, at most."""
    if os.environ.get(RING_ENV, "") == "0":
        ring = None
    return LiveRun(iface, bpf, count, duration, write_path, limits, ring, backlog)
