# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled capture walk: whole pcap records in a buffer, each frame into a segment tuple.

Built by the project's own build when Cython and a C compiler are there (setup.py); without it the walks
of `ksniff.capture.pcap` run their pure-Python loop, which stays the reference: a test holds the two to
the same segments and the same audit on the whole corpus. This is the part of a run the profile gives
most to on bulk captures (bench/README.md): the per-record header, the Ethernet/IPv4/TCP headers of the
common frame read straight from the bytes, the tuple built without intermediate objects.

`pcap_batch` walks whole records only and stops before the first one that runs past `end`, leaving that
record, and everything about refilling the buffer or reporting damage, to the Python walk. Frames that
are not the common case (VLAN tags, IP options, IPv6, fragments, other link types) go to the Python
`parse` function, as in the pure-Python walk.

`inorder` is the reassembler's hot loop over those batches (Reassembler.batch_events): the in-order
segments of a connection on the hot path joined to the chunk being merged, in C, on the same Python
objects; every other segment is handed back to the Python loop, the reference it is tested against.

`pieces` measures a large chunk's segment payloads for the decoder's frame splitter in one pass (their
bytes, and whether all are views of a mapped capture file), as `ksniff.decode.frames.measure_python` does.
"""

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM

cdef extern from *:
    """
    static inline unsigned int ks_be32(const unsigned char *p) {
        return ((unsigned int)p[0] << 24) | ((unsigned int)p[1] << 16) | ((unsigned int)p[2] << 8) | p[3];
    }
    static inline unsigned int ks_le32(const unsigned char *p) {
        return ((unsigned int)p[3] << 24) | ((unsigned int)p[2] << 16) | ((unsigned int)p[1] << 8) | p[0];
    }
    static inline unsigned int ks_be16(const unsigned char *p) {
        return ((unsigned int)p[0] << 8) | p[1];
    }
    """
    unsigned int ks_be32(const unsigned char *p) nogil
    unsigned int ks_le32(const unsigned char *p) nogil
    unsigned int ks_be16(const unsigned char *p) nogil

cdef extern from *:
    """
    /* base[start:stop] (0 <= start <= stop <= len(base)) for a one-dimensional view of single bytes laid
       out one after another, made as memoryview's own slicing makes it (a new view of the same managed
       buffer, then its start, length and shape set: memory_subscript's init_slice and init_len; its
       flags stay those of a contiguous view), without the slice object and the two ints of its bounds
       that `base[start:stop]` makes and frees for every segment. None: `base` is not such a view, slice
       it. */
    static PyObject *ks_subview(PyObject *base, Py_ssize_t start, Py_ssize_t stop) {
        Py_buffer *b, *v;
        PyObject *mv;
        if (!PyMemoryView_Check(base))
            Py_RETURN_NONE;
        b = PyMemoryView_GET_BUFFER(base);
        if (b->ndim != 1 || b->itemsize != 1 || b->strides == NULL || b->strides[0] != 1
                || b->suboffsets != NULL || b->shape == NULL)
            Py_RETURN_NONE;
        mv = PyMemoryView_FromObject(base);
        if (mv == NULL)
            return NULL;
        v = PyMemoryView_GET_BUFFER(mv);
        v->buf = (char *)v->buf + start;
        v->shape[0] = stop - start;
        v->len = stop - start;
        return mv;
    }
    """
    object ks_subview(object base, Py_ssize_t start, Py_ssize_t stop)

# The codes of ksniff.capture.packets (kept equal by a test).
cdef enum:
    FRAGMENT = 1
    CUT_SHORT = 2
    DAMAGED = 3

CODES = (FRAGMENT, CUT_SHORT, DAMAGED)  # for the test that keeps them equal to ksniff.capture.packets'


cdef inline bint _header_sum_ok(const unsigned char *h, Py_ssize_t n):
    """An IPv4 header of `n` bytes whose checksum holds, or is 0 (not filled in: left to the NIC by
    some capture hosts); ksniff.capture.packets.header_sum_ok, the reference."""
    cdef unsigned long long total = 0
    cdef Py_ssize_t i
    if not (h[10] | h[11]):
        return True
    # The ones' complement sum of its 16-bit words, taken 32 bits at a time (an IPv4 header is whole
    # 32-bit words) and folded: the carries out of each half go back in, as the 16-bit sum's do.
    for i in range(0, n, 4):
        total += ks_be32(h + i)
    total = (total & 0xFFFFFFFFLL) + (total >> 32)  # LL: a C constant, not a Python int
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


# _segment is ksniff.capture.packets.segment_of again, in C: kept because it pays. The walk alone
# (CaptureFile(path).segments(), CPU, the median of 5 runs alternating in one process each, load average
# 10-13 on 2 cores) over bench/bench_capture.py's 100 MB pcap of 100,200 frames: 0.160 s pure-Python,
# 0.071 s compiled; the same file as pcapng: 0.199 s and 0.092 s. test_compiled_walk.py holds them equal.
cdef inline int _headers(const unsigned char *b, Py_ssize_t p, Py_ssize_t q, Py_ssize_t et_off,
                         Py_ssize_t l2, Py_ssize_t *t, Py_ssize_t *d, Py_ssize_t *e):
    """Whether the frame in b[p:q] is the common one (IPv4 of 20 bytes carrying TCP, not a fragment,
    whole) on a link with a fast path (l2 >= 0): 1, its TCP header at t[0] and its payload b[d[0]:e[0]];
    -1, such a frame whose IPv4 header fails its checksum; 0, any other frame (for `parse`)."""
    cdef Py_ssize_t ip, ip_end
    if l2 >= 0 and q - p >= l2 + 34:
        ip = p + l2
        if (ks_be16(b + p + et_off) == 0x0800 and b[ip] == 0x45 and b[ip + 9] == 6
                and not ks_be16(b + ip + 6) & 0x3FFF):
            if not _header_sum_ok(b + ip, 20):
                return -1
            ip_end = ip + ks_be16(b + ip + 2)
            t[0] = ip + 20
            d[0] = t[0] + (b[t[0] + 12] >> 4) * 4
            e[0] = ip_end
            if d[0] <= ip_end <= q:
                return 1
    return 0


cdef inline object _payload(buf, Py_ssize_t d, Py_ssize_t e):
    payload = ks_subview(buf, d, e)
    return buf[d:e] if payload is None else payload


cdef inline object _segment(buf, const unsigned char *b, Py_ssize_t p, Py_ssize_t q, Py_ssize_t et_off,
                            Py_ssize_t l2, double ts, object parse, object link):
    """The segment in frame bytes b[p:q], or the code `parse` gives, as ksniff.capture.packets'
    segment_of: the common frame (`_headers`) read straight from the bytes, every other frame by
    `parse`."""
    cdef Py_ssize_t t, d, e
    cdef int common = _headers(b, p, q, et_off, l2, &t, &d, &e)
    if common > 0:
        return (ts, _address(b + t - 8), _port(ks_be16(b + t)), _address(b + t - 4), _port(ks_be16(b + t + 2)),
                ks_be32(b + t + 4), ks_be32(b + t + 8), b[t + 13], _payload(buf, d, e))
    if common < 0:
        return DAMAGED
    return parse(ts, buf, p, q, link)


# The addresses and ports of the segments made above, kept and handed out again: a capture has few of
# them, and the same bytes object for the same address spares making and freeing two bytes objects and
# two ints per packet, and hashing the addresses again in the reassembler's connection table (a bytes
# object keeps its hash). Equal values either way; a slot holds the last value that fell on it.
cdef enum:
    ADDRESS_SLOTS = 256
    PORT_SLOTS = 1024

cdef object _addresses = [None] * ADDRESS_SLOTS
cdef unsigned int _address_values[ADDRESS_SLOTS]
cdef object _ports = [None] * PORT_SLOTS


cdef inline object _address(const unsigned char *a):
    """The IPv4 address at `a` as 4 bytes: the object made for it before, when it still holds its slot."""
    cdef unsigned int value = ks_be32(a)
    cdef Py_ssize_t slot = (value ^ (value >> 8) ^ (value >> 16) ^ (value >> 24)) & (ADDRESS_SLOTS - 1)
    cdef object known = (<list> _addresses)[slot]
    if known is not None and _address_values[slot] == value:
        return known
    made = PyBytes_FromStringAndSize(<const char *>a, 4)
    (<list> _addresses)[slot] = made
    _address_values[slot] = value
    return made


cdef inline object _port(unsigned int value):
    """The port `value` as an int: the object made for it before, when it still holds its slot."""
    cdef Py_ssize_t slot = value & (PORT_SLOTS - 1)
    cdef object known = (<list> _ports)[slot]
    if known is not None and <unsigned int> known == value:
        return known
    made = <object> value
    (<list> _ports)[slot] = made
    return made


cdef inline void _take(object seg, list out, Py_ssize_t *missed):
    """A segment to `out`; a code counted in missed[not TCP, fragments, cut short, damaged]."""
    if type(seg) is tuple:
        out.append(seg)
    elif seg == FRAGMENT:
        missed[1] += 1
    elif seg == CUT_SHORT:
        missed[2] += 1
    elif seg == DAMAGED:
        missed[3] += 1
    else:
        missed[0] += 1


cdef inline object _address_of(unsigned int value):
    """The IPv4 address `value` (as read by ks_be32) as `_address` hands it out."""
    cdef unsigned char a[4]
    a[0], a[1], a[2], a[3] = value >> 24, (value >> 16) & 0xFF, (value >> 8) & 0xFF, value & 0xFF
    return _address(a)


@cython.final
cdef class Segments:
    """A batch of the compiled walk's segments in columns: the numbers of each common frame's segment
    (`_headers`) kept as C numbers, its payload view made as `_segment` makes it, and a segment `parse`
    made kept as its tuple. Read as a sequence it is the list of segment tuples the walk appends to a
    list (each tuple made when asked for, of the same objects), for any loop over segments; the
    reassembler's hot loop (`inorder`) reads the columns themselves, without a tuple, a float and two
    ints made and freed for every packet (bench/README.md, "The walk's batches in columns")."""

    cdef readonly Py_ssize_t n, cap
    cdef double *ts
    cdef unsigned int *sip
    cdef unsigned int *dip
    cdef unsigned int *seq
    cdef unsigned int *ack
    cdef unsigned short *sp
    cdef unsigned short *dp
    cdef unsigned char *flags
    cdef Py_ssize_t *size  # the payload's bytes
    cdef list items  # per segment: its payload, or the whole tuple `parse` made

    def __cinit__(self, Py_ssize_t cap):
        if cap < 0:
            raise ValueError("a negative capacity")
        self.cap, self.n = cap, 0
        self.ts = <double *> PyMem_Malloc(cap * sizeof(double) + 1)
        self.sip = <unsigned int *> PyMem_Malloc(cap * sizeof(unsigned int) * 4 + 1)
        self.sp = <unsigned short *> PyMem_Malloc(cap * sizeof(unsigned short) * 2 + 1)
        self.flags = <unsigned char *> PyMem_Malloc(cap + 1)
        self.size = <Py_ssize_t *> PyMem_Malloc(cap * sizeof(Py_ssize_t) + 1)
        if self.ts is NULL or self.sip is NULL or self.sp is NULL or self.flags is NULL or self.size is NULL:
            raise MemoryError()
        self.dip, self.seq, self.ack = self.sip + cap, self.sip + 2 * cap, self.sip + 3 * cap
        self.dp = self.sp + cap
        self.items = []

    def __dealloc__(self):
        PyMem_Free(self.ts)
        PyMem_Free(self.sip)
        PyMem_Free(self.sp)
        PyMem_Free(self.flags)
        PyMem_Free(self.size)

    cdef inline int add(self, buf, const unsigned char *b, Py_ssize_t p, Py_ssize_t q, Py_ssize_t et_off,
                        Py_ssize_t l2, double ts, object parse, object link, Py_ssize_t *missed) except -1:
        """The frame in b[p:q], as `_take(_segment(...))` takes it (codes counted in `missed`)."""
        cdef Py_ssize_t t, d, e, k = self.n
        cdef int common = _headers(b, p, q, et_off, l2, &t, &d, &e)
        if k >= self.cap:
            raise IndexError("a batch of segments past its capacity")
        if common > 0:
            self.ts[k] = ts
            self.sip[k], self.dip[k] = ks_be32(b + t - 8), ks_be32(b + t - 4)
            self.sp[k], self.dp[k] = ks_be16(b + t), ks_be16(b + t + 2)
            self.seq[k], self.ack[k] = ks_be32(b + t + 4), ks_be32(b + t + 8)
            self.flags[k] = b[t + 13]
            self.size[k] = e - d
            self.items.append(_payload(buf, d, e))
            self.n = k + 1
        elif common < 0:
            missed[3] += 1
        else:
            seg = parse(ts, buf, p, q, link)
            if type(seg) is tuple:
                self.items.append(seg)
                self.n = k + 1
            else:
                _take(seg, None, missed)
        return 0

    cdef inline tuple made(self, Py_ssize_t k):
        cdef object item = (<list> self.items)[k]
        if type(item) is tuple:
            return <tuple> item
        return (self.ts[k], _address_of(self.sip[k]), _port(self.sp[k]), _address_of(self.dip[k]),
                _port(self.dp[k]), self.seq[k], self.ack[k], self.flags[k], item)

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        cdef Py_ssize_t k
        if isinstance(index, slice):
            return [self.made(k) for k in range(*index.indices(self.n))]
        return self.made(_index(index, self.n, "segment"))

    def __iter__(self):
        cdef Py_ssize_t k
        for k in range(self.n):
            yield self.made(k)


# A packet's time out of line with both its neighbours, while they are in line with each other, is taken as
# damaged (ksniff.capture.walk.TIME_SLACK and out_of_line, the reference, kept equal by a test).
cdef double TIME_SLACK = 0.001
SLACK = TIME_SLACK  # for that test


cdef inline bint _out_of_line(double prev, double ts, double nxt):
    """A spike: `ts` more than TIME_SLACK before `prev` or after `nxt`, the two neighbours in line."""
    return prev <= nxt + TIME_SLACK and (ts < prev - TIME_SLACK or ts > nxt + TIME_SLACK)


cdef Py_ssize_t _index(object index, Py_ssize_t n, str what) except -1:
    """The place of `index` (from the end when negative) in a sequence of `n`, as a list takes it."""
    cdef Py_ssize_t k = index
    if k < 0:
        k += n
    if not 0 <= k < n:
        raise IndexError(f"{what} index out of range")
    return k


cdef Segments _columns(object out, Py_ssize_t limit):
    """`out` when it is a `Segments` (refused when it has no room for `limit` more), else None: a list."""
    if type(out) is Segments:
        if (<Segments> out).cap - (<Segments> out).n < limit:
            raise ValueError("a batch of segments without room for the records asked for")
        return <Segments> out
    if type(out) is not list:
        raise TypeError("segments go to a list or to a Segments")
    return None


def pcap_batch(buf, Py_ssize_t pos, Py_ssize_t end, bint big_endian, double unit, int link,
               Py_ssize_t et_off, Py_ssize_t l2, object parse, object out, Py_ssize_t limit, object prev):
    """Walks whole pcap records from `pos`, at most `limit` of them, appending segment tuples to `out`
    (a list, or a `Segments` with room for them).

    `et_off` and `l2` place the link type field and the IPv4 header in the frame (l2 < 0: no fast path
    for this link type, every frame goes to `parse`). `prev` is the time given to the record before
    `pos` (None: none). A record's time that cannot be (a fraction of a second of a second or more), or
    that is out of line with both its neighbours (`_out_of_line`; the next record's time is read ahead
    when its header is in hand), is taken as damaged: the record gets the time of the one before it.
    Returns (pos after the last whole record walked, records walked, not TCP, fragments, cut short,
    damaged headers, time of the last record walked or None, times taken as damaged)."""
    cdef const unsigned char[::1] view = buf
    cdef const unsigned char *b = &view[0] if view.shape[0] else NULL
    cdef Py_ssize_t p, q, packets = 0, damaged = 0
    cdef Py_ssize_t[4] missed = [0, 0, 0, 0]  # not TCP, fragments, cut short, damaged
    cdef unsigned int sec, frac, caplen, nsec, nfrac
    cdef double ts = 0.0, last = 0.0
    cdef bint has_last = prev is not None
    cdef object link_type = link  # made a Python int once, for `parse`
    cdef Segments cols = _columns(out, limit)
    if has_last:
        last = prev
    if end > view.shape[0]:
        end = view.shape[0]
    while packets < limit and pos + 16 <= end:
        if big_endian:
            sec, frac, caplen = ks_be32(b + pos), ks_be32(b + pos + 4), ks_be32(b + pos + 8)
        else:
            sec, frac, caplen = ks_le32(b + pos), ks_le32(b + pos + 4), ks_le32(b + pos + 8)
        p = pos + 16
        if <Py_ssize_t>caplen > end - p:
            break
        q = p + caplen
        pos = q
        ts = <double>sec + <double>frac / unit
        if frac >= unit:
            if has_last:
                ts = last
            else:
                ts = <double>sec
            damaged += 1
        elif has_last and pos + 8 <= end:
            if big_endian:
                nsec, nfrac = ks_be32(b + pos), ks_be32(b + pos + 4)
            else:
                nsec, nfrac = ks_le32(b + pos), ks_le32(b + pos + 4)
            if nfrac < unit and _out_of_line(last, ts, <double>nsec + <double>nfrac / unit):
                ts = last
                damaged += 1
        last, has_last = ts, True
        packets += 1
        if cols is not None:
            cols.add(buf, b, p, q, et_off, l2, ts, parse, link_type, missed)
        else:
            _take(_segment(buf, b, p, q, et_off, l2, ts, parse, link_type), out, missed)
    return pos, packets, missed[0], missed[1], missed[2], missed[3], (ts if packets else None), damaged


def pcapng_batch(buf, Py_ssize_t pos, Py_ssize_t end, bint big_endian, list links, list units,
                 list offsets, list fields, object parse, object out, Py_ssize_t limit, Py_ssize_t max_block,
                 object prev):
    """Walks whole enhanced packet blocks of one section from `pos`, at most `limit` of them, appending
    segment tuples to `out` (as `pcap_batch`); stops before any other block, a block running past `end`, and
    anything the Python walk must judge (a bad length, an interface not described). Per interface: its link
    type, timestamp ticks per second, offset in seconds and (link type field offset, link header length) of
    the fast path or None. `prev` and the times taken as damaged as in `pcap_batch` (the next block's time
    read ahead when it is an enhanced packet block of an interface described). Returns (pos, packets, not
    TCP, fragments, cut short, damaged headers, first time, last time, times taken as damaged)."""
    cdef const unsigned char[::1] view = buf
    cdef const unsigned char *b = &view[0] if view.shape[0] else NULL
    cdef Py_ssize_t p, q, l2, et_off, packets = 0, damaged = 0, n_ifaces = len(links)
    cdef Py_ssize_t[4] missed = [0, 0, 0, 0]  # not TCP, fragments, cut short, damaged
    cdef unsigned int btype, blen, iface, hi, lo, caplen, niface
    cdef double ts = 0.0, first = 0.0, last = 0.0, nxt
    cdef bint has_last = prev is not None
    cdef object f
    cdef Segments cols = _columns(out, limit)
    if has_last:
        last = prev
    if end > view.shape[0]:
        end = view.shape[0]
    while packets < limit and pos + 28 <= end:
        if big_endian:
            btype, blen, iface = ks_be32(b + pos), ks_be32(b + pos + 4), ks_be32(b + pos + 8)
            hi, lo, caplen = ks_be32(b + pos + 12), ks_be32(b + pos + 16), ks_be32(b + pos + 20)
        else:
            btype, blen, iface = ks_le32(b + pos), ks_le32(b + pos + 4), ks_le32(b + pos + 8)
            hi, lo, caplen = ks_le32(b + pos + 12), ks_le32(b + pos + 16), ks_le32(b + pos + 20)
        if (btype != 6 or blen < 12 or blen & 3 or <Py_ssize_t>blen > max_block or <Py_ssize_t>blen > end - pos
                or <Py_ssize_t>iface >= n_ifaces or <Py_ssize_t>caplen + 28 > <Py_ssize_t>blen):
            break
        ts = <double>(((<unsigned long long>hi) << 32) | lo) / <double>units[iface] + <double>offsets[iface]
        p = pos + 28
        q = p + caplen
        pos += blen
        if has_last and pos + 20 <= end:
            if big_endian:
                btype, niface = ks_be32(b + pos), ks_be32(b + pos + 8)
                hi, lo = ks_be32(b + pos + 12), ks_be32(b + pos + 16)
            else:
                btype, niface = ks_le32(b + pos), ks_le32(b + pos + 8)
                hi, lo = ks_le32(b + pos + 12), ks_le32(b + pos + 16)
            if btype == 6 and <Py_ssize_t>niface < n_ifaces:
                nxt = (<double>(((<unsigned long long>hi) << 32) | lo) / <double>units[niface]
                       + <double>offsets[niface])
                if _out_of_line(last, ts, nxt):
                    ts = last
                    damaged += 1
        if not packets:
            first = ts
        last, has_last = ts, True
        packets += 1
        f = fields[iface]
        et_off, l2 = f if f is not None else (0, -1)
        if cols is not None:
            cols.add(buf, b, p, q, et_off, l2, ts, parse, links[iface], missed)
        else:
            _take(_segment(buf, b, p, q, et_off, l2, ts, parse, links[iface]), out, missed)
    return (pos, packets, missed[0], missed[1], missed[2], missed[3], (first if packets else None),
            (ts if packets else None), damaged)


cdef extern from *:
    """
    #include <string.h>
    static inline unsigned int ks_u32(const unsigned char *p) {
        unsigned int v; memcpy(&v, p, 4); return v;
    }
    static inline unsigned int ks_u16(const unsigned char *p) {
        unsigned short v; memcpy(&v, p, 2); return v;
    }
    """
    unsigned int ks_u32(const unsigned char *p) nogil
    unsigned int ks_u16(const unsigned char *p) nogil

from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_AS_STRING

# The layouts of ksniff.capture.ring (kept equal by a test).
cdef enum:
    BLOCK_PACKETS = 12  # tpacket_block_desc: num_pkts
    BLOCK_FIRST = 16  # offset_to_first_pkt
    HDR_LEN = 48  # TPACKET_ALIGN(sizeof(struct tpacket3_hdr)); the sockaddr_ll follows
    HDR_HATYPE = 56  # sockaddr_ll.sll_hatype
    HDR_PKTTYPE = 58  # sockaddr_ll.sll_pkttype
    HDR_END = 68  # the end of the sockaddr_ll
    PACKET_OUTGOING = 4
    ARPHRD_LOOPBACK = 772

RING_LAYOUT = (BLOCK_PACKETS, BLOCK_FIRST, HDR_LEN, HDR_HATYPE, HDR_PKTTYPE, HDR_END, PACKET_OUTGOING,
               ARPHRD_LOOPBACK)


def ring_block(ring, Py_ssize_t block, Py_ssize_t size, bint skip_outgoing, Py_ssize_t limit,
               const unsigned char[::1] head):
    """Copies the packets of the TPACKET_V3 ring block at `block` (`size` bytes) out of the ring as a
    pcap file in memory: `head` (the file header), then a record per packet (seconds, nanoseconds,
    captured and wire length in this machine's byte order, then the frame), at most `limit` of them,
    leaving out the copies of packets leaving through a loopback device (seen again as they arrive)
    when `skip_outgoing`. The same as `ksniff.capture.ring.block_records` (the reference); the copy
    itself runs without the GIL. Returns (the pcap bytes, packets copied, packets left out)."""
    cdef const unsigned char[::1] view = ring
    cdef const unsigned char *b
    cdef const unsigned char *h
    cdef Py_ssize_t p, total = 0, kept = 0, skipped = 0, i, n, nxt, mac, snap
    cdef char *o
    if block < 0 or block + size > view.shape[0] or size < HDR_END:
        raise ValueError("ring block out of range")
    b = &view[block]
    n = ks_u32(b + BLOCK_PACKETS)
    p = ks_u32(b + BLOCK_FIRST)
    # First the size of what is kept, so the records go to one bytes object made once.
    for i in range(n):
        if p < HDR_LEN or p + HDR_END > size:
            break
        h = b + p
        snap, mac = ks_u32(h + 12), ks_u16(h + 24)
        if mac + snap > size - p:
            break
        if kept == limit:
            break
        if skip_outgoing and h[HDR_PKTTYPE] == PACKET_OUTGOING and ks_u16(h + HDR_HATYPE) == ARPHRD_LOOPBACK:
            skipped += 1
        else:
            kept += 1
            total += 16 + snap
        nxt = ks_u32(h)
        if nxt == 0:
            break
        p += nxt
    out = PyBytes_FromStringAndSize(NULL, total + head.shape[0])
    o = PyBytes_AS_STRING(out)
    if head.shape[0]:
        memcpy(o, &head[0], head.shape[0])
        o += head.shape[0]
    with nogil:
        p = ks_u32(b + BLOCK_FIRST)
        i = 0
        while i < kept:
            h = b + p
            snap, mac = ks_u32(h + 12), ks_u16(h + 24)
            if not (skip_outgoing and h[HDR_PKTTYPE] == PACKET_OUTGOING
                    and ks_u16(h + HDR_HATYPE) == ARPHRD_LOOPBACK):
                memcpy(o, h + 4, 8)  # tp_sec, tp_nsec
                memcpy(o + 8, h + 12, 4)  # tp_snaplen: the captured length
                memcpy(o + 12, h + 16, 4)  # tp_len: the length on the wire
                memcpy(o + 16, h + mac, snap)
                o += 16 + snap
                i += 1
            p += ks_u32(h)
    return out, kept, skipped


# -- the reassembler's hot loop (ksniff.capture.reassembly.Reassembler.batch_events) ------------------

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

from ksniff.common._slotdesc cimport slot_offset as _slot, slot_put as _put

cdef extern from "Python.h":
    PyObject *PyDict_GetItemWithError(object, object) except? NULL
    Py_ssize_t PyTuple_GET_SIZE(object)
    PyObject *PyTuple_GET_ITEM(object, Py_ssize_t)
    double PyFloat_AS_DOUBLE(object)
    object PyFloat_FromDouble(double)
    long long PyLong_AsLongLongAndOverflow(object, int *) except? -1

cdef long long SMALL = 1LL << 62  # the numbers the hot loop adds to stay far from overflow
cdef enum:
    FOUND = 4  # directions the hot loop remembers by their segments' address and port objects
    VALUE_SLOTS = 256  # ... and by their numbers (a power of two)

# The flags the hot loop leaves to the careful path (ksniff.capture.reassembly._SLOW_FLAGS, kept equal
# by a test): FIN, SYN, RST, TRUNCATED, TICK.
SLOW_FLAGS = 0x01 | 0x02 | 0x04 | 0x100 | 0x200
cdef long long SLOW = SLOW_FLAGS  # the same, as a C integer for the hot loop


@cython.final
cdef class HotSlots:
    """Where the hot loop finds the fields it reads and writes: the slots of the reassembler's `Half`
    (one direction of a connection); and the capture's clock (`pm`, its latest timestamp so far), kept
    across calls by the reassembler."""

    cdef Py_ssize_t fast, last_ts, ack_out, nxt, nxt32, parts, p_off, p_len, p_last, p_marks, tail, tail_off
    cdef public double pm
    cdef public long long n  # segments taken so far (Reassembler._n)
    # ChunkMerger.start and flush_half in C (`Chunks`), when the reassembler hands them over; None: the
    # hot loop calls the merger's Python methods.
    cdef public Chunks chunks
    cdef object keep  # the classes, alive as long as their offsets are used
    # The directions found last, with the four objects of the segment that found each: a segment whose
    # addresses and ports are those very objects (the compiled walk hands the same ones out again) is of
    # that direction, without a key made and looked up, as long as the direction is on the hot path
    # (`Half.fast`: a direction leaves the connection table only through a release, which clears it).
    cdef list found  # [sip, sp, dip, dp, half] per entry, FOUND entries, the newest replacing in turn
    cdef Py_ssize_t turn
    # The same for the segments of a `Segments` batch, by their addresses' and ports' numbers, in a table
    # of VALUE_SLOTS directions each on the slot its numbers hash to (traffic of many connections, as
    # small transactions are, finds its direction there without a key made and looked up in the dict).
    cdef unsigned int v_sip[VALUE_SLOTS]
    cdef unsigned int v_dip[VALUE_SLOTS]
    cdef unsigned int v_ports[VALUE_SLOTS]  # source port << 16 | destination port
    cdef list v_half

    def __init__(self, type half):
        self.fast, self.last_ts = _slot(half, "fast"), _slot(half, "last_ts")
        self.ack_out, self.nxt, self.nxt32 = _slot(half, "ack_out"), _slot(half, "nxt"), _slot(half, "nxt32")
        self.parts, self.p_off, self.p_len = _slot(half, "parts"), _slot(half, "p_off"), _slot(half, "p_len")
        self.p_last, self.p_marks = _slot(half, "p_last"), _slot(half, "p_marks")
        self.tail, self.tail_off = _slot(half, "tail"), _slot(half, "tail_off")
        self.pm = float("-inf")
        self.n = 0
        self.keep = half
        self.found = [None] * (FOUND * 5)
        self.turn = 0
        self.v_half = [None] * VALUE_SLOTS

    cdef object half_of(self, tuple seg, dict table):
        """The direction of `seg` (borrowing the table's), or None: unknown, or known and not on the hot
        path."""
        cdef Py_ssize_t k
        cdef list found = self.found
        cdef PyObject *hit
        for k in range(0, FOUND * 5, 5):
            if (<PyObject *> found[k] is PyTuple_GET_ITEM(seg, 1) and <PyObject *> found[k + 1] is PyTuple_GET_ITEM(seg, 2)
                    and <PyObject *> found[k + 2] is PyTuple_GET_ITEM(seg, 3)
                    and <PyObject *> found[k + 3] is PyTuple_GET_ITEM(seg, 4)):
                h = found[k + 4]
                hit = _get(h, self.fast)
                if hit is not NULL and <object> hit is True:
                    return h
                break
        hit = PyDict_GetItemWithError(table, (seg[1], seg[2], seg[3], seg[4]))
        if hit is NULL:
            return None
        h = <object> hit
        k = self.turn
        found[k], found[k + 1], found[k + 2], found[k + 3], found[k + 4] = seg[1], seg[2], seg[3], seg[4], h
        self.turn = (k + 5) % (FOUND * 5)
        return h


    cdef object half_at(self, Segments segs, Py_ssize_t k, dict table):
        """`half_of` for the segment `k` of a `Segments` batch, a common frame's."""
        cdef unsigned int sip = segs.sip[k], dip = segs.dip[k]
        cdef unsigned int ports = (<unsigned int> segs.sp[k]) << 16 | segs.dp[k]
        cdef unsigned int mixed = sip * 0x9E3779B1u ^ dip * 0x85EBCA77u ^ ports * 0xC2B2AE3Du
        cdef Py_ssize_t j = (mixed ^ (mixed >> 16)) & (VALUE_SLOTS - 1)
        cdef PyObject *hit
        if self.v_sip[j] == sip and self.v_dip[j] == dip and self.v_ports[j] == ports:
            h = self.v_half[j]
            if h is not None:
                hit = _get(h, self.fast)
                if hit is not NULL and <object> hit is True:
                    return h
        key = (_address_of(sip), _port(segs.sp[k]), _address_of(dip), _port(segs.dp[k]))
        hit = PyDict_GetItemWithError(table, key)
        if hit is NULL:
            return None
        h = <object> hit
        self.v_sip[j], self.v_dip[j], self.v_ports[j] = sip, dip, ports
        self.v_half[j] = h
        return h


@cython.final
cdef class Chunks:
    """`ChunkMerger.start` and `ChunkMerger.flush_half` (ksniff.capture.chunks, the reference) in C, for the
    hot loop: the same steps on the same objects, the chunk made as a `StreamChunk` with every field in
    its slot (as the class's own `__init__` stores them). Anything not as those classes make it (an
    empty slot, a merger without its dict) is handed to the Python methods."""

    cdef Py_ssize_t conn, from_src, peer, parts, p_off, p_len, p_first, p_last, p_at, p_marks, tail, tail_off
    cdef Py_ssize_t conn_id, m_out, m_pending, m_at
    cdef Py_ssize_t c_conn, c_from_src, c_offset, c_data, c_first_ts, c_last_ts, c_marks, c_at
    cdef Py_ssize_t max_pending, tail_kept
    cdef public Py_ssize_t pieces_from  # ChunkMerger.pieces_from: such chunks go to its flush_half
    cdef object chunk, make, keep

    def __init__(self, type half, type conn, type merger, type chunk, Py_ssize_t max_pending,
                 Py_ssize_t tail_kept):
        self.conn, self.from_src, self.peer = _slot(half, "conn"), _slot(half, "from_src"), _slot(half, "peer")
        self.parts, self.p_off, self.p_len = _slot(half, "parts"), _slot(half, "p_off"), _slot(half, "p_len")
        self.p_first, self.p_last, self.p_at = _slot(half, "p_first"), _slot(half, "p_last"), _slot(half, "p_at")
        self.p_marks, self.tail, self.tail_off = _slot(half, "p_marks"), _slot(half, "tail"), _slot(half, "tail_off")
        self.conn_id = _slot(conn, "id")
        self.m_out, self.m_pending, self.m_at = _slot(merger, "out"), _slot(merger, "pending"), _slot(merger, "at")
        self.c_conn, self.c_from_src = _slot(chunk, "conn"), _slot(chunk, "from_src")
        self.c_offset, self.c_data = _slot(chunk, "offset"), _slot(chunk, "data")
        self.c_first_ts, self.c_last_ts = _slot(chunk, "first_ts"), _slot(chunk, "last_ts")
        self.c_marks, self.c_at = _slot(chunk, "marks"), _slot(chunk, "at")
        self.max_pending, self.tail_kept = max_pending, tail_kept
        self.pieces_from = 0
        self.chunk, self.make = chunk, object.__new__
        self.keep = (half, conn, merger)  # alive as long as their offsets are used

    cdef int start(self, object merger, object h, object off, object payload, object plen, object ts,
                   object at) except -1:
        """ChunkMerger.start, with `merger.at` set to `at` first (as the Python loop does)."""
        cdef PyObject *pending = _get(merger, self.m_pending)
        cdef PyObject *peer = _get(h, self.peer)
        cdef PyObject *peer_parts
        if pending is NULL or type(<object> pending) is not dict or peer is NULL:
            merger.at = at
            merger.start(h, off, payload, plen, ts)
            return 0
        _put(merger, self.m_at, at)
        if len(<dict> pending) >= self.max_pending:
            merger.flush()
        peer_parts = _get(<object> peer, self.parts)
        if peer_parts is not NULL and <object> peer_parts is not None:
            self.flush_half(merger, <object> peer)
        _put(h, self.parts, [payload])
        _put(h, self.p_off, off)
        _put(h, self.p_len, plen)
        _put(h, self.p_first, ts)
        _put(h, self.p_last, ts)
        _put(h, self.p_marks, None)
        _put(h, self.p_at, at)
        (<dict> _get(merger, self.m_pending))[h] = None
        return 0

    cdef int flush_half(self, object merger, object h) except -1:
        """ChunkMerger.flush_half: the chunk `h` is merging leaves (to the merger's `out`)."""
        cdef PyObject *pending = _get(merger, self.m_pending)
        cdef PyObject *out = _get(merger, self.m_out)
        cdef PyObject *parts = _get(h, self.parts)
        cdef PyObject *conn = _get(h, self.conn)
        cdef Py_ssize_t size
        if (pending is NULL or type(<object> pending) is not dict or out is NULL or parts is NULL
                or conn is NULL or _get(<object> conn, self.conn_id) is NULL or _get(h, self.from_src) is NULL
                or _get(h, self.p_off) is NULL or _get(h, self.p_first) is NULL or _get(h, self.p_last) is NULL
                or _get(h, self.p_at) is NULL or _get(h, self.p_marks) is NULL
                or self.pieces_from and type(<object> parts) is list and len(<list> parts) >= self.pieces_from):
            merger.flush_half(h)
            return 0
        del (<dict> pending)[h]
        joined = <object> parts
        _put(h, self.parts, None)
        data = b"".join(joined)
        marks = <object> _get(h, self.p_marks)
        _put(h, self.p_marks, None)
        marks = () if marks is None else (<Marks> marks).as_tuple() if type(marks) is Marks else tuple(marks)
        chunk = self.make(self.chunk)
        p_off = <object> _get(h, self.p_off)
        _put(chunk, self.c_conn, <object> _get(<object> conn, self.conn_id))
        _put(chunk, self.c_from_src, <object> _get(h, self.from_src))
        _put(chunk, self.c_offset, p_off)
        _put(chunk, self.c_data, data)
        _put(chunk, self.c_first_ts, <object> _get(h, self.p_first))
        _put(chunk, self.c_last_ts, <object> _get(h, self.p_last))
        _put(chunk, self.c_marks, marks)
        _put(chunk, self.c_at, <object> _get(h, self.p_at))
        (<object> out).append(chunk)
        size = len(data)
        if size <= self.tail_kept:
            _put(h, self.tail, data)
            _put(h, self.tail_off, p_off)
        else:  # a copy of the end, so the whole chunk does not stay alive through it
            _put(h, self.tail, data[size - self.tail_kept:])
            _put(h, self.tail_off, p_off + size - self.tail_kept)
        return 0


from bisect import bisect_right as _bisect_right
from operator import itemgetter as _itemgetter

_offset = _itemgetter(0)


cdef struct Mark:
    long long at
    double ts


@cython.final
cdef class Marks:
    """A chunk's time marks (`StreamChunk.marks`: where the capture time changes, as (stream offset, time)
    pairs in stream order), kept as C numbers: the hot loop adds one per segment of bulk traffic, and a
    pair of objects and the tuple holding them per mark were about a quarter of its work on the 1 GB capture
    (it keeps a chunk's first MARKS_LISTED marks as the list the Python loop makes, then this).
    It reads as the sequence of those pairs (each made when asked for: `len`, an index, iteration,
    equality); a slice is a new `Marks`. The Python code that appends to a chunk's marks (`append`,
    `extend`) keeps using it as the list it was; a mark that is not an int offset and a float time (a
    test's integer times) turns it into such a list inside (`spilled`), so every value stays as given.
    A chunk handed on as its pieces (ChunkMerger.pieces_from) keeps it as its marks, for the decoder's
    frame splitter, which reads a frame's times from it (`time_at`) and holds a frame's marks in one
    (`extend`); a chunk joined gets the tuple of its pairs, as before."""

    cdef Mark *marks
    cdef Py_ssize_t n, cap
    cdef list spilled

    def __cinit__(self, marks=()):
        self.n = self.cap = 0
        if marks:
            self.extend(marks)

    def __dealloc__(self):
        PyMem_Free(self.marks)

    cdef int add(self, long long at, double ts) except -1:
        """The mark (at, ts), unless spilled (then as a tuple of an int and a float)."""
        cdef Py_ssize_t cap
        cdef void *grown
        if self.spilled is not None:
            self.spilled.append((at, PyFloat_FromDouble(ts)))
            return 0
        if self.n == self.cap:
            cap = self.cap * 4 if self.cap else 4  # most chunks of small exchanges have one or two
            grown = PyMem_Realloc(self.marks, cap * sizeof(Mark))
            if grown is NULL:
                raise MemoryError()
            self.marks = <Mark *> grown
            self.cap = cap
        self.marks[self.n].at = at
        self.marks[self.n].ts = ts
        self.n += 1
        return 0

    cdef int take(self, list marks) except -1:
        """`extend` by a list of marks (made by the Python loop or the hot loop's first ones)."""
        cdef long long at
        for mark in marks:
            if (self.spilled is None and type(mark) is tuple and len(<tuple> mark) == 2
                    and type((<tuple> mark)[1]) is float and _small((<tuple> mark)[0], &at)):
                self.add(at, PyFloat_AS_DOUBLE((<tuple> mark)[1]))
            else:
                self.append(mark)
        return 0

    cdef int spill(self) except -1:
        if self.spilled is None:
            self.spilled = [self.item(k) for k in range(self.n)]
            self.n = 0
        return 0

    cdef inline tuple item(self, Py_ssize_t k):
        return (<object> self.marks[k].at, PyFloat_FromDouble(self.marks[k].ts))

    def append(self, mark):
        """list.append: a mark (offset, time)."""
        cdef long long at
        if self.spilled is None and type(mark) is tuple and len(mark) == 2 and type(mark[1]) is float:
            if _small(mark[0], &at):
                self.add(at, PyFloat_AS_DOUBLE(mark[1]))
                return
        self.spill()
        self.spilled.append(mark)

    def extend(self, marks):
        """list.extend: the marks of another `Marks` copied as numbers, any other's one at a time."""
        cdef Marks other
        cdef Py_ssize_t k
        if type(marks) is Marks and self.spilled is None and (<Marks> marks).spilled is None:
            other = <Marks> marks
            for k in range(other.n):
                self.add(other.marks[k].at, other.marks[k].ts)
            return
        for mark in list(marks):
            self.append(mark)

    def clear(self):
        self.n = 0
        self.spilled = None

    def time_at(self, Py_ssize_t m, ts, at):
        """`ksniff.decode.frames._time_at` over these marks: the capture time of stream offset `at`, given
        `ts` before marks[m:], and the index of the first mark after `at`."""
        cdef Py_ssize_t lo, hi, mid
        cdef long long where
        if self.spilled is not None or not _small(at, &where):  # the pairs themselves, as frames does
            pairs = self.spilled if self.spilled is not None else self.as_tuple()
            lo = _bisect_right(pairs, at, m, key=_offset)
            return (pairs[lo - 1][1] if lo > m else ts), lo
        lo, hi = m, self.n
        if lo < 0:
            lo = 0
        while lo < hi:
            mid = (lo + hi) // 2
            if where < self.marks[mid].at:
                hi = mid
            else:
                lo = mid + 1
        return (PyFloat_FromDouble(self.marks[lo - 1].ts) if lo > m else ts), lo

    cdef tuple as_tuple(self):
        cdef Py_ssize_t k
        cdef tuple out
        if self.spilled is not None:
            return tuple(self.spilled)
        out = PyTuple_New(self.n)
        for k in range(self.n):
            pair = self.item(k)
            Py_INCREF(pair)  # PyTuple_SET_ITEM takes this reference
            PyTuple_SET_ITEM(out, k, pair)
        return out

    def __len__(self):
        return len(self.spilled) if self.spilled is not None else self.n

    def __getitem__(self, index):
        cdef Py_ssize_t k
        cdef Marks part
        if self.spilled is not None:
            got = self.spilled[index]
            return Marks(got) if isinstance(index, slice) else got
        if isinstance(index, slice):
            part = Marks()
            for k in range(*index.indices(self.n)):
                part.add(self.marks[k].at, self.marks[k].ts)
            return part
        return self.item(_index(index, self.n, "mark"))

    def __iter__(self):
        return iter(self.as_tuple())

    def __eq__(self, other):
        if type(other) is Marks or type(other) is tuple or type(other) is list:
            return self.as_tuple() == tuple(other)
        return NotImplemented

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __repr__(self):
        return f"Marks({list(self.as_tuple())!r})"

    def __reduce__(self):
        return (Marks, (self.as_tuple(),))


cdef inline PyObject *_get(object o, Py_ssize_t offset):
    """The object in the slot at `offset` of `o`, borrowed (NULL when the slot is empty)."""
    return (<PyObject **> (<char *> <PyObject *> o + offset))[0]


# The hot loop keeps a chunk's first marks as the list of pairs the Python loop makes, and the rest as
# numbers (`Marks`) once the chunk has this many: chunks of small exchanges, which are joined and carry a
# tuple of their marks, have one or two; a bulk chunk handed on as its pieces has one per segment.
cdef Py_ssize_t MARKS_LISTED = 8


# TCP sequence numbers: 32 bits, and half their space (halves.MASK, halves.HALF), as C integers (a bare
# 0xFFFFFFFF is a Python int to Cython, and the arithmetic with it Python's).
cdef long long SEQ_MASK = 0xFFFFFFFFLL
cdef long long SEQ_HALF = 0x80000000LL


def inorder(segs, Py_ssize_t i, dict table, object merger, object out, double sweep_at,
            Py_ssize_t max_chunk, HotSlots at):
    """The hot loop of `Reassembler.events` over `segs[i:]` (a list of segment tuples, or a `Segments`
    batch), in C: segments of a known connection that may take the hot path (`Half.fast`), with no slow
    flag and their bytes in order, update their direction and join its chunk being merged
    (`ChunkMerger.start` and `flush_half` are called as the Python loop calls them), the clock (`at.pm`)
    and the count of segments (`at.n`). Stops after a segment that left events in `out` (returns the
    next index, so the caller yields them before going on), or before one the Python loop must take
    (returns ~index: a sweep or a cell's end due at `sweep_at` passed, an unknown connection, a slow
    flag, bytes out of order, anything not of the usual types); nothing of that segment is changed then.
    Returns len(segs) at the end.

    The numbers a run of segments of one direction moves on (`nxt`, `nxt32`, and `p_len` of its chunk)
    are kept as C integers while the run lasts, and its `last_ts` and `ack_out` as C numbers or the
    segment's own objects (`Held`); they are stored in its slots once, when another direction's
    segment comes, before anything is called (the merger's methods) and when the loop returns: not an
    int or a float made and freed for each of them per segment. Nothing outside this loop reads them in
    between. A `Segments` batch's common frames are read from its columns: no tuple, and a float for
    the segment's time only where one is kept (a time mark, the chunk's first and last times)."""
    cdef Segments cols = None
    cdef list lst = None
    cdef Py_ssize_t n, plen
    cdef long long seq, nxt, nxt32, p_off = 0, p_len = 0, bits, bits_old, ackv = 0
    cdef double tsd
    cdef bint joins
    cdef PyObject *field
    cdef tuple seg
    cdef object h, ts, payload, flags, ack, marks
    cdef bint differs
    cdef Held held = Held()  # the direction whose numbers are kept in C, if any
    if type(segs) is Segments:
        cols = <Segments> segs
        n = cols.n
    elif type(segs) is list:
        lst = <list> segs
        n = len(lst)
    else:
        raise TypeError("the hot loop takes a list of segments or a Segments batch")
    try:
        while i < n:
            item = (<list> cols.items)[i] if cols is not None else lst[i]
            if cols is not None and type(item) is not tuple:
                # a common frame's segment, from the columns
                tsd = cols.ts[i]
                ts = ack = None
                bits = cols.flags[i]
                payload = item
                if tsd > at.pm and tsd >= sweep_at:
                    return ~i
                if bits & SLOW:
                    return ~i
                h = at.half_at(cols, i, table)
                seq, ackv = cols.seq[i], cols.ack[i]
                plen = cols.size[i]
            else:
                if type(item) is not tuple or PyTuple_GET_SIZE(item) != 9:
                    return ~i
                seg = <tuple> item
                ts = seg[0]
                flags = seg[7]
                payload = seg[8]
                if type(ts) is not float or type(flags) is not int:
                    return ~i
                tsd = PyFloat_AS_DOUBLE(ts)
                if tsd > at.pm and tsd >= sweep_at:
                    return ~i
                if not _small(flags, &bits) or bits & SLOW:
                    return ~i
                if type(payload) is not memoryview and type(payload) is not bytes:
                    return ~i
                h = at.half_of(seg, table)
                ack = seg[6]
                seq = -1  # read below, where it is needed
                plen = len(payload)
            if h is None:
                return ~i
            field = _get(h, at.fast)
            if field is NULL or <object> field is not True:  # False, or not a bool: the Python loop judges
                return ~i
            joins = False
            if plen:
                if held.half is not h:
                    held.store(at)
                # Every number this segment changes read first, as C integers (ints of the usual size only).
                if ts is not None and not _small(seg[5], &seq):
                    return ~i
                if held.half is h:
                    nxt, nxt32 = held.nxt, held.nxt32
                elif not (_small_slot(h, at.nxt32, &nxt32) and _small_slot(h, at.nxt, &nxt)):
                    return ~i
                if seq != nxt32:
                    # Bytes all delivered already (a retransmission, or the twin of a segment another
                    # capture point gave first): the careful path's steps for them, which change only
                    # these fields and may count a difference (OutOfOrder.compare_old, `differs`).
                    bits_old = (nxt32 - seq) & SEQ_MASK
                    if bits_old >= SEQ_HALF or plen > bits_old:
                        return ~i
                    held.store(at)
                    if not _delivered_again(h, at, nxt - bits_old, payload, plen, merger):
                        return ~i
                    if tsd > at.pm:
                        at.pm = tsd
                    at.n += 1
                    merger.at = at.n  # as the careful path leaves it (what a later drain's chunk starts at)
                    held.saw(at, h, tsd, ts, bits & 0x10, ackv, ack)
                    i += 1
                    continue
                field = _get(h, at.parts)
                if field is NULL:
                    return ~i
                joins = <object> field is not None
                if joins and not (type(<object> field) is list and _get(h, at.p_last) is not NULL
                                  and _small_slot(h, at.p_off, &p_off)):
                    return ~i
                if joins:
                    if held.half is h:
                        p_len = held.p_len
                    elif not _small_slot(h, at.p_len, &p_len):
                        return ~i
            if tsd > at.pm:
                at.pm = tsd
            at.n += 1
            held.saw(at, h, tsd, ts, True, ackv, ack)
            i += 1
            if not plen:
                continue
            if joins:
                (<list> _get(h, at.parts)).append(payload)
                if held.half is h and held.has_last:  # the chunk's last time, kept in C
                    differs = tsd != held.p_last
                else:
                    field = _get(h, at.p_last)
                    differs = (tsd != PyFloat_AS_DOUBLE(<object> field) if type(<object> field) is float
                               else (ts if ts is not None else held.time()) != <object> field)
                if differs:
                    field = _get(h, at.p_marks)
                    if field is not NULL and type(<object> field) is Marks:
                        (<Marks> field).add(p_off + p_len, tsd)
                    elif field is NULL or <object> field is None:
                        _put(h, at.p_marks, [(<object> (p_off + p_len), held.time())])
                    elif type(<object> field) is list and len(<list> field) >= MARKS_LISTED:
                        marks = Marks.__new__(Marks)
                        (<Marks> marks).take(<list> field)
                        (<Marks> marks).add(p_off + p_len, tsd)
                        _put(h, at.p_marks, marks)
                    else:
                        (<object> field).append((<object> (p_off + p_len), held.time()))
                p_len += plen
                held.keep(h, nxt + plen, (seq + plen) & SEQ_MASK, p_len)
                if differs:
                    held.keep_last(tsd)
                if p_len >= max_chunk:
                    held.store(at)
                    if at.chunks is not None:
                        at.chunks.flush_half(merger, h)
                    else:
                        merger.flush_half(h)
            else:
                ts = held.time()
                held.store(at)
                _put(h, at.nxt, <object> (nxt + plen))
                _put(h, at.nxt32, <object> ((seq + plen) & SEQ_MASK))
                if at.chunks is not None:
                    at.chunks.start(merger, h, <object> nxt, payload, <object> plen, ts, <object> at.n)
                else:
                    merger.at = at.n
                    merger.start(h, <object> nxt, payload, <object> plen, ts)
            if out:
                return i
        return i
    finally:
        held.store(at)


from libc.string cimport memcmp
from cpython.memoryview cimport PyMemoryView_GET_BUFFER
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE


# OutOfOrder.compare_old's pieces of the chunk being merged compared, from its end back (overlap.py).
cdef Py_ssize_t PIECES_COMPARED = 8


cdef int _delivered_again(object h, HotSlots at, long long off, object data, Py_ssize_t n,
                          object merger) except -1:
    """`ksniff.capture.overlap.differs` (the reference) for the hot loop, counted in the merger's stats as
    `compare_old` counts it: bytes [off, off + n) of direction `h`, all delivered already, against the
    pieces of the chunk being merged and the last chunk's tail. 0, before anything is counted, when a
    field is not as the reassembler makes it: the careful path takes the segment then."""
    cdef long long end = off + n, stop, start, a, b, p_off, p_len, t_off
    cdef Py_ssize_t k, walked = 0
    cdef int same = 1
    cdef PyObject *field = _get(h, at.parts)
    cdef object parts, piece, tail
    if field is NULL:
        return 0
    parts = <object> field
    if parts is not None:
        if type(parts) is not list or not (_small_slot(h, at.p_off, &p_off) and _small_slot(h, at.p_len, &p_len)):
            return 0
    field = _get(h, at.tail)
    if field is NULL:
        return 0
    tail = <object> field
    t_off = 0
    if tail is not None and not _small_slot(h, at.tail_off, &t_off):
        return 0
    if parts is not None and end > p_off:
        k = len(<list> parts)
        stop = p_off + p_len
        while k and walked < PIECES_COMPARED:
            k -= 1
            walked += 1
            piece = (<list> parts)[k]
            start = stop - len(piece)
            if start < end:
                a, b = max(start, off), min(stop, end)
                same = _same(piece, a - start, data, a - off, b - a)
                if not same:
                    break
            if start <= off:
                break
            stop = start
        else:
            if k == 0:  # every piece walked: the bytes before the chunk, against the tail
                same = _tail_same(tail, t_off, data, off, p_off)
    else:
        same = _tail_same(tail, t_off, data, off, end)
    if not same:
        merger.stats.overlaps_differing += 1
    return 1


cdef int _tail_same(object tail, long long t_off, object data, long long off, long long end) except -1:
    cdef long long a, b
    if tail is None:
        return 1
    a, b = max(off, t_off), min(end, t_off + len(tail))
    if a >= b:
        return 1
    return _same(tail, a - t_off, data, a - off, b - a)


cdef int _same(object x, Py_ssize_t xo, object y, Py_ssize_t yo, Py_ssize_t n) except -1:
    """Whether x[xo:xo + n] and y[yo:yo + n] hold the same bytes (compared in place for bytes and flat
    views of bytes, else as Python compares their slices)."""
    cdef const char *px = _flat(x)
    cdef const char *py = _flat(y)
    if px is NULL or py is NULL:
        return x[xo:xo + n] == y[yo:yo + n]
    return memcmp(px + xo, py + yo, n) == 0


cdef inline const char *_flat(object x):
    cdef Py_buffer *b
    if type(x) is bytes:
        return PyBytes_AS_STRING(x)
    if type(x) is memoryview:
        b = PyMemoryView_GET_BUFFER(x)
        if b.ndim == 1 and b.itemsize == 1 and (b.strides is NULL or b.strides[0] == 1):
            return <const char *> b.buf
    return NULL


@cython.final
cdef class Held:
    """What the hot loop keeps in C until `store` puts it in the slots: the direction whose `nxt`,
    `nxt32` and chunk's `p_len` it keeps as C integers, and its chunk's last time `p_last` as a C double
    once it moved (`half`; None: none), and the direction whose
    `last_ts` and `ack_out` it keeps (`seen`; None: none), each as the segment's own object when it came
    with one (a tuple's), else as a C number (a `Segments` column's), its object made when stored."""

    cdef object half
    cdef long long nxt, nxt32, p_len
    cdef double p_last  # `half`'s chunk's last time, when `has_last`
    cdef bint has_last
    cdef object seen, seen_ts, seen_ack
    cdef double seen_tsd
    cdef long long seen_ackv
    cdef bint has_ack

    cdef inline void keep(self, object half, long long nxt, long long nxt32, long long p_len):
        self.half = half
        self.nxt, self.nxt32, self.p_len = nxt, nxt32, p_len

    cdef inline void keep_last(self, double p_last):
        """`half`'s chunk goes on with bytes of another capture time (`ChunkMerger.mark`'s `p_last`)."""
        self.p_last, self.has_last = p_last, True

    cdef inline int saw(self, HotSlots at, object h, double tsd, object ts, bint acked, long long ackv,
                        object ack) except -1:
        """Direction `h`'s segment at time `tsd` (its float `ts`, or None) came; with `acked`, its
        acknowledgement number is the direction's `ack_out` (`ack`, or None and `ackv`)."""
        if self.seen is not h:
            self.store_seen(at)
            self.seen = h
        self.seen_tsd, self.seen_ts = tsd, ts
        if acked:
            self.has_ack = True
            self.seen_ackv, self.seen_ack = ackv, ack
        return 0

    cdef inline object time(self):
        """The float of the time `saw` was last given (made once, and kept for its store)."""
        if self.seen_ts is None:
            self.seen_ts = PyFloat_FromDouble(self.seen_tsd)
        return self.seen_ts

    cdef inline void store_seen(self, HotSlots at):
        if self.seen is None:
            return
        _put(self.seen, at.last_ts, self.time())
        if self.has_ack:
            _put(self.seen, at.ack_out, self.seen_ack if self.seen_ack is not None else <object> self.seen_ackv)
        self.seen = self.seen_ts = self.seen_ack = None
        self.has_ack = False

    cdef inline void store(self, HotSlots at):
        if self.half is not None and self.has_last:  # one float for both times when they are the same
            if self.seen is self.half and self.seen_tsd == self.p_last:
                _put(self.half, at.p_last, self.time())
            else:
                _put(self.half, at.p_last, PyFloat_FromDouble(self.p_last))
        self.has_last = False
        self.store_seen(at)
        if self.half is None:
            return
        _put(self.half, at.nxt, <object> self.nxt)
        _put(self.half, at.nxt32, <object> self.nxt32)
        _put(self.half, at.p_len, <object> self.p_len)
        self.half = None


cdef inline bint _small(object value, long long *out):
    """Whether `value` is an int well inside 64 bits (its value then in `out`)."""
    cdef int overflow = 0
    cdef long long v
    if type(value) is not int:
        return False
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or v > SMALL or v < -SMALL:
        return False
    out[0] = v
    return True


cdef inline bint _small_slot(object o, Py_ssize_t offset, long long *out):
    cdef PyObject *field = _get(o, offset)
    return field is not NULL and _small(<object> field, out)


# -- a large chunk's pieces (ChunkMerger.pieces_from), as the decoder's frame splitter measures them ----

cdef extern from *:
    """
    /* The bytes of a one-dimensional view of single bytes (its len()), else -1; its owner in `owner`. */
    static inline Py_ssize_t ks_view_bytes(PyObject *mv, PyObject **owner) {
        Py_buffer *b = PyMemoryView_GET_BUFFER(mv);
        if (b->ndim != 1 || b->itemsize != 1)
            return -1;
        *owner = b->obj;
        return b->len;
    }
    """
    Py_ssize_t ks_view_bytes(PyObject *mv, PyObject **owner)

cdef extern from "Python.h":
    PyObject **PySequence_Fast_ITEMS(object)
    Py_ssize_t PySequence_Fast_GET_SIZE(object)


def pieces(parts, type mapped):
    """(bytes in `parts`, whether every one of them is a view of a `mapped` object): a tuple or list of
    a chunk's segment payloads measured in one pass, for `ksniff.decode.frames.measure`, the reference it
    is held to (`sum(map(len, parts))`, `_mapped`). None when a piece is anything but bytes or a
    one-dimensional view of bytes: the reference measures those."""
    cdef Py_ssize_t i, n, total = 0
    cdef PyObject **items
    cdef PyObject *p
    cdef PyObject *owner
    cdef Py_ssize_t size
    cdef bint all_mapped
    if type(parts) is not tuple and type(parts) is not list:
        return None
    items = PySequence_Fast_ITEMS(parts)
    n = PySequence_Fast_GET_SIZE(parts)
    all_mapped = n > 0
    for i in range(n):
        p = items[i]
        if type(<object> p) is memoryview:
            owner = NULL
            size = ks_view_bytes(p, &owner)
            if size < 0:
                return None
            total += size
            if all_mapped and (owner is NULL or type(<object> owner) is not mapped):
                all_mapped = False
        elif type(<object> p) is bytes:
            total += len(<bytes> p)
            all_mapped = False
        else:
            return None
    return total, all_mapped


# -- where in a mapped file each payload is (the Spark engine's segment rows, ksniff.engine.spark_tasks) --

cdef extern from *:
    """
    /* Where the bytes of view `mv` begin in those of view `base`, when `mv` is a one-dimensional view of
       single bytes lying wholly within them; else -1. */
    static inline Py_ssize_t ks_offset_in(PyObject *mv, Py_buffer *base) {
        Py_buffer *b = PyMemoryView_GET_BUFFER(mv);
        Py_ssize_t at;
        if (b->ndim != 1 || b->itemsize != 1 || b->len < 0)
            return -1;
        at = (const char *)b->buf - (const char *)base->buf;
        if (at < 0 || at > base->len || b->len > base->len - at)
            return -1;
        return at;
    }
    """
    Py_ssize_t ks_offset_in(PyObject *mv, Py_buffer *base)


from cpython.memoryview cimport PyMemoryView_GET_BUFFER


def payload_offsets(list segs, base):
    """For each segment tuple of the walk in `segs`, where its payload's bytes begin in those of `base`
    (a memoryview of the whole mapped file, the walk's buffer), or -1 when the payload is not a view
    lying within them (a truncated segment's length, bytes, a view of anything else). There is no
    pure-Python way to ask a view where it begins: without this module the segments carry their bytes."""
    cdef Py_ssize_t i, n = len(segs)
    cdef list out = [-1] * n
    cdef tuple seg
    cdef object payload
    cdef Py_buffer *b
    if type(base) is not memoryview:
        return out
    b = PyMemoryView_GET_BUFFER(base)
    if b.ndim != 1 or b.itemsize != 1:
        return out
    for i in range(n):
        seg = <tuple> segs[i]
        payload = seg[8]
        if type(payload) is memoryview:
            out[i] = ks_offset_in(<PyObject *> payload, b)
    return out


# The pages of a mapped capture file, mapped in ahead of the walk and dropped behind it, for
# ksniff.capture.readahead's worker thread: both run without the GIL, so the walk goes on meanwhile.
cdef extern from *:
    """
    #include <stdint.h>
    #include <sys/mman.h>
    #include <unistd.h>
    #ifndef MADV_POPULATE_READ
    #define MADV_POPULATE_READ 22  /* Linux 5.14 */
    #endif

    static long ks_page(void) {
        long page = sysconf(_SC_PAGESIZE);
        return page > 0 ? page : 4096;
    }

    /* Maps the pages of [p, p + n) in: by the kernel in one call where it can (MADV_POPULATE_READ),
       else by reading a byte of each page, which faults it in (from the page cache, or the disk). */
    static void ks_populate(const unsigned char *p, size_t n) {
        long page = ks_page();
        uintptr_t start = (uintptr_t)p & ~(uintptr_t)(page - 1);
        volatile unsigned char sink;
        if (madvise((void *)start, (uintptr_t)p + n - start, MADV_POPULATE_READ) == 0)
            return;
        for (size_t i = 0; i < n; i += page)  /* a byte of every page the range overlaps */
            sink = p[i];
        sink = p[n - 1];
        (void)sink;
    }

    /* Drops the whole pages of [p, p + n) from the mapping (their next read maps them in again from
       the file). Only for a mapping's own page-aligned start, so nothing outside it is touched. */
    static int ks_release(const unsigned char *p, size_t n) {
        long page = ks_page();
        if ((uintptr_t)p % page)
            return -1;
        n -= n % page;
        return n ? madvise((void *)p, n, MADV_DONTNEED) : 0;
    }
    """
    void ks_populate(const unsigned char *p, size_t n) nogil
    int ks_release(const unsigned char *p, size_t n) nogil


def populate(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t stop):
    """Maps the pages of buf[start:stop] in (a memory map of a capture file), without the GIL."""
    stop = min(stop, buf.shape[0])
    if 0 <= start < stop:
        with nogil:
            ks_populate(&buf[start], stop - start)


def release(const unsigned char[::1] buf, Py_ssize_t stop):
    """Drops the mapped pages of buf[:stop] (a whole memory map of a capture file, so it starts on a
    page), without the GIL. Returns madvise's 0, or -1 (the buffer does not start on a page: nothing
    dropped)."""
    cdef int done = 0
    stop = min(stop, buf.shape[0])
    if stop > 0:
        with nogil:
            done = ks_release(&buf[0], stop)
    return done


# TCP's flags as ksniff.capture.packets names them (kept equal by a test): FIN, SYN, RST, ACK.
TCP_FLAGS = (0x01, 0x02, 0x04, 0x10)
cdef enum:
    K_FIN = 0x01
    K_SYN = 0x02
    K_RST = 0x04
    K_ACK = 0x10


def scan_batch(list segs, dict dirs, set servers, Py_ssize_t max_dirs, Py_ssize_t max_servers, address):
    """The capture-set planner's scan (ksniff.engine.sets.scan_segments, the reference) over one batch of
    the walk's segment tuples: for each TCP direction (src, sport, dst, dport) in `dirs`, [its first
    sequence number, the lowest and the highest byte seen relative to it, whether it opened (SYN) and
    closed (FIN)]; `address(ip, port)` of each connection opened, into `servers`. Returns the segments of
    directions left out at `max_dirs`."""
    cdef Py_ssize_t dropped = 0
    cdef tuple seg
    cdef list r
    cdef object found, payload
    cdef long flags
    cdef long long n, rel
    cdef unsigned long long seq, first
    for seg in segs:
        flags = seg[7]
        payload = seg[8]
        n = payload if type(payload) is int else len(payload)
        key = seg[1:5]
        found = dirs.get(key)
        if flags & K_SYN and not flags & K_ACK and len(servers) < max_servers:
            servers.add(address(seg[3], seg[4]))
        if found is None:
            if len(dirs) >= max_dirs:
                dropped += 1
                continue
            r = [seg[5], 0, n, flags & K_SYN, S_LEVEL, None]
            dirs[key] = r
            if n >= S_BYTES and type(payload) is not int:
                _sample(r, <unsigned int>(<unsigned long long>seg[5] & 0xFFFFFFFFULL), payload, n, seg[0])
            continue
        r = <list>found
        if flags & (K_FIN | K_RST):
            r[3] = r[3] | K_FIN
            if r[3] == K_SYN | K_FIN:
                r[5] = _s_trimmed(r[5])  # opened and closed here: a few samples kept (sets.scan)
        seq = seg[5]
        first = r[0]
        rel = <long long>((seq - first) & 0xFFFFFFFFULL)
        if rel >= 0x80000000LL:
            rel -= 0x100000000LL
        if rel < <long long>r[1]:
            r[1] = rel
        if rel + n > <long long>r[2]:
            r[2] = rel + n
        if n >= S_BYTES and type(payload) is not int and r[3] != K_SYN | K_FIN:
            _sample(r, <unsigned int>(seq & 0xFFFFFFFFULL), payload, n, seg[0])
    return dropped


# The planner's samples of a direction's bytes (ksniff.engine.sets: SAMPLE_LEVEL, SAMPLES, SAMPLE_BYTES;
# kept equal by a test): a record per sample, its sequence number (4 bytes, little-endian), its bytes and
# the time of the segment that held them (a double, little-endian on the machines this builds for).
SAMPLING = (2, 32, 8, 4)
cdef enum:
    S_LEVEL = 2
    S_MAX = 32
    S_BYTES = 8
    S_SIZE = 20
    S_CLOSED = 4


cdef inline unsigned int _s_pos(const unsigned char* p):
    return p[0] | (<unsigned int>p[1] << 8) | (<unsigned int>p[2] << 16) | (<unsigned int>p[3] << 24)


cdef bint _s_holds(bytearray held, unsigned int pos):
    cdef const unsigned char* p = <const unsigned char*>PyByteArray_AS_STRING(held)
    cdef Py_ssize_t i, size = PyByteArray_GET_SIZE(held)
    for i in range(0, size, S_SIZE):
        if _s_pos(p + i) == pos:
            return True
    return False


cdef object _s_trimmed(object held):
    """sets._trimmed: the S_CLOSED samples at the lowest sequence numbers, in their order."""
    if held is None:
        return None
    cdef bytearray h = <bytearray>held
    cdef const unsigned char* p = <const unsigned char*>PyByteArray_AS_STRING(h)
    cdef Py_ssize_t i, best, size = PyByteArray_GET_SIZE(h)
    cdef long long last = -1, low, pos
    cdef int k
    cdef bytearray out = bytearray()
    for k in range(S_CLOSED):
        best = -1
        low = 0x100000000LL
        for i in range(0, size, S_SIZE):
            pos = _s_pos(p + i)
            if last < pos < low:
                low = pos
                best = i
        if best < 0:
            break
        out += h[best : best + S_SIZE]
        last = low
    return out


cdef object _s_coarsened(object held, long level):
    """sets._coarsened: the samples at multiples of 2**level, in their order."""
    if held is None:
        return None
    cdef bytearray h = <bytearray>held
    cdef const unsigned char* p = <const unsigned char*>PyByteArray_AS_STRING(h)
    cdef Py_ssize_t i, size = PyByteArray_GET_SIZE(h)
    cdef unsigned int mask = <unsigned int>((1ULL << level) - 1)
    cdef bytearray out = bytearray()
    for i in range(0, size, S_SIZE):
        if not _s_pos(p + i) & mask:
            out += h[i : i + S_SIZE]
    return out


cdef void _sample(list r, unsigned int seq, object payload, long long n, double ts) except *:
    """sets.sample, the reference: the bytes at each multiple of 2**level the segment holds whole."""
    cdef long level = r[4]
    cdef long long d, step
    cdef unsigned int pos
    cdef const unsigned char[:] view
    cdef unsigned char record[S_SIZE]
    cdef object held
    while (n >> level) > S_MAX and level < 31:
        level += 1
    if level != <long>r[4]:
        r[4] = level
        r[5] = _s_coarsened(r[5], level)
    step = 1LL << level
    d = <long long>((0x100000000ULL - seq) & <unsigned long long>(step - 1))
    if d + S_BYTES > n:
        return
    view = payload
    while d + S_BYTES <= n:
        pos = <unsigned int>((seq + <unsigned long long>d) & 0xFFFFFFFFULL)
        held = r[5]
        if held is None:
            held = bytearray()
            r[5] = held
        if not _s_holds(<bytearray>held, pos):
            record[0] = pos & 0xFF
            record[1] = (pos >> 8) & 0xFF
            record[2] = (pos >> 16) & 0xFF
            record[3] = (pos >> 24) & 0xFF
            memcpy(&record[4], &view[d], S_BYTES)
            memcpy(&record[4 + S_BYTES], &ts, 8)
            held += PyBytes_FromStringAndSize(<char*>record, S_SIZE)
            while PyByteArray_GET_SIZE(held) > S_MAX * S_SIZE and level < 31:
                level += 1
                r[4] = level
                held = _s_coarsened(held, level)
                r[5] = held
            step = 1LL << level
        d += 1
        d += <long long>((0x100000000ULL - ((seq + <unsigned long long>d) & 0xFFFFFFFFULL)) & <unsigned long long>(step - 1))
