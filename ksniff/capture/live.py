"""Live capture from a Linux interface: a raw AF_PACKET socket with the BPF filter in the kernel.

`open_live` returns a run shaped like the file run (iterate for events; `stats`, `inputs`, `warnings`,
`drop`) plus `stop()`, callable from another thread or a signal handler. Reading never blocks for long,
so a stop, the duration or the packet count end the capture within a fraction of a second; what the
kernel already queued is still read. Kernel drops come from PACKET_STATISTICS. The interface `any`
captures IP packets of all interfaces (without link headers, so it is recorded as link type RAW).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator

from ksniff.capture.errors import CaptureError, CaptureLimits
from ksniff.capture.events import CaptureStats, InputInfo, StreamEvent
from ksniff.capture.packets import CUT_SHORT, FRAGMENT, TICK, linktype_name, parse_frame
from ksniff.capture.reassembly import Reassembler

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
        self._writer = None
        if write_path is not None:
            try:
                self._writer = open(write_path, "wb")  # noqa: SIM115 - open for the whole capture
            except OSError as exc:
                self._sock.close()
                raise CaptureError(f"{write_path}: {exc.strerror or exc}") from None
            self._writer.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, self.linktype))
        self._started = time.monotonic()

    @property
    def inputs(self) -> list[InputInfo]:
        return [
            InputInfo(self.iface, "live", linktype_name(self.linktype), self.stats.packets, self.bytes_read)
        ]

    def stop(self) -> None:
        """End the capture soon; safe from any thread and from signal handlers."""
        self._stop.set()

    def drop(self, conn_id: int) -> None:
        self.reassembler.drop(conn_id)

    def __iter__(self) -> Iterator[StreamEvent]:
        return self._events()

    def _events(self) -> Iterator[StreamEvent]:
        r = self.reassembler
        yield from r.events(self._segments(), finish=False)
        if not self._finished:
            self._finished = True
            r.finish()
            self._close()
            while r.out:
                yield r.out.popleft()

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

    def _close(self) -> None:
        self._read_kernel_drops()
        self._sock.close()
        if self._writer is not None:
            self._writer.close()
        self.warnings.extend(self.reassembler.warnings())
        if self.stats.kernel_drops:
            self.warnings.append(f"{self.iface}: the kernel dropped {self.stats.kernel_drops} packets")


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
        sock.bind(("", 0) if any_iface else (iface, 0))
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
    _discard_queued(sock)
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
    """Packets that arrived between socket() and the filter being attached would bypass it."""
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
) -> LiveRun:
    """Start capturing on `iface`; raises CaptureError (one line) when that is not possible."""
    return LiveRun(iface, bpf, count, duration, write_path, limits)
