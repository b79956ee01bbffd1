# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled codec of ksniff.engine.pack: the same bytes, written and read in C.

ksniff.engine.pack describes the encoding and is the reference: tests/engine/test_pack.py holds this codec
to its bytes and its values on every event of the corpus. What differs is only how: a value's class is
looked at once, strings, integers, floats and byte strings are written from their C representation into
one growing buffer, and tuples are made and filled in C when read. A value this module does not know goes
through the reference's own code (an integer beyond 64 bits, a string with lone surrogates) or pickle.
"""

import pickle
import sys
from uuid import UUID as _UUID

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_FromDouble
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.list cimport PyList_Append
from libc.string cimport memcmp, memcpy

from ksniff.decode import values
from ksniff.engine import pack as _reference

if sys.byteorder != "little":  # the floats are written from memory: the reference does it elsewhere
    raise ImportError("ksniff.engine._pack writes floats as a little-endian machine holds them")


cdef extern from "Python.h":
    Py_ssize_t PyTuple_GET_SIZE(object)
    PyObject *PyTuple_GET_ITEM(object, Py_ssize_t)
    Py_ssize_t PyList_GET_SIZE(object)
    PyObject *PyList_GET_ITEM(object, Py_ssize_t)
    const char *PyUnicode_AsUTF8AndSize(object, Py_ssize_t *) except NULL
    object PyUnicode_DecodeUTF8(const char *, Py_ssize_t, const char *)
    PyObject *PyDict_GetItem(object, object)


cdef enum:
    MAGIC = 0xA7
    NONE = 0
    FALSE = 1
    TRUE = 2
    INT = 3
    FLOAT = 4
    STR = 5
    STR_AGAIN = 6
    BYTES = 7
    TUPLE = 8
    LIST = 9
    FROZENSET = 10
    SET = 11
    DICT = 12
    STRUCT = 13
    STRUCT_NAMED = 14
    RECORD = 15
    UUID = 16
    PICKLED = 17


cdef class _Out:
    """A growing byte buffer."""

    cdef unsigned char *buf
    cdef Py_ssize_t n, cap

    def __cinit__(self):
        self.cap = 512
        self.n = 0
        self.buf = <unsigned char *>PyMem_Malloc(self.cap)
        if self.buf == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.buf)

    cdef int room(self, Py_ssize_t k) except -1:
        cdef Py_ssize_t cap
        cdef unsigned char *grown
        if self.n + k <= self.cap:
            return 0
        cap = self.cap * 2
        if cap < self.n + k:
            cap = self.n + k
        grown = <unsigned char *>PyMem_Realloc(self.buf, cap)
        if grown == NULL:
            raise MemoryError()
        self.buf, self.cap = grown, cap
        return 0

    cdef inline int byte(self, unsigned char b) except -1:
        if self.n >= self.cap:
            self.room(1)
        self.buf[self.n] = b
        self.n += 1
        return 0

    cdef int varint(self, unsigned long long v) except -1:
        self.room(10)
        while v >= 0x80:
            self.buf[self.n] = <unsigned char>((v & 0x7F) | 0x80)
            self.n += 1
            v >>= 7
        self.buf[self.n] = <unsigned char>v
        self.n += 1
        return 0

    cdef int raw(self, const char *p, Py_ssize_t k) except -1:
        self.room(k)
        memcpy(self.buf + self.n, p, k)
        self.n += k
        return 0

    cdef int blob(self, bytes data) except -1:
        self.raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
        return 0


cdef class Codec:
    """ksniff.engine.pack.Codec, compiled: `pack` and `unpack` give and take the same bytes."""

    cdef readonly tuple classes
    cdef readonly object renamed
    cdef dict place
    cdef tuple getters
    cdef tuple widths
    cdef tuple renamed_at
    cdef dict numbers  # Struct class -> its schema struct's number, or -1 (made outside the tables)
    cdef list by_number  # the Struct classes read so far, at their numbers (None: not yet)
    cdef type struct_meta

    def __init__(self, classes, renamed=None):
        self.classes = tuple(classes)
        self.renamed = renamed
        self.renamed_at = tuple(_reference._place_of(cls, renamed) for cls in self.classes)
        self.place = {cls: n for n, cls in enumerate(self.classes)}
        self.getters = tuple(_reference.fields_of(cls) for cls in self.classes)
        self.widths = tuple(len(cls.__match_args__) for cls in self.classes)
        self.numbers = {}
        self.by_number = []
        self.struct_meta = type(values.Struct)

    def pack(self, obj):
        cdef _Out out = _Out()
        out.byte(MAGIC)
        self.value(out, obj, {})
        return PyBytes_FromStringAndSize(<char *>out.buf, out.n)

    cdef int value(self, _Out out, object v, dict strings) except -1:
        cdef type cls = type(v)
        cdef PyObject *hit
        cdef Py_ssize_t size, i, n
        cdef const char *text
        cdef long long x
        cdef int overflow
        cdef double d
        if cls is str:
            hit = PyDict_GetItem(strings, v)
            if hit == NULL:
                strings[v] = len(strings)
                try:
                    text = PyUnicode_AsUTF8AndSize(v, &size)
                except UnicodeEncodeError:  # lone surrogates: as the reference writes them
                    data = (<str>v).encode("utf-8", "surrogatepass")
                    out.byte(STR)
                    out.varint(PyBytes_GET_SIZE(data))
                    out.blob(data)
                    return 0
                out.byte(STR)
                out.varint(size)
                out.raw(text, size)
            else:
                out.byte(STR_AGAIN)
                out.varint(<object>hit)
        elif cls is int:
            x = PyLong_AsLongLongAndOverflow(v, &overflow)
            out.byte(INT)
            if overflow:
                _big(out, v)
            else:
                out.varint((<unsigned long long>x << 1) ^ <unsigned long long>(x >> 63))
        elif v is None:
            out.byte(NONE)
        elif cls is bool:
            out.byte(TRUE if v is True else FALSE)
        elif type(cls) is self.struct_meta:
            hit = PyDict_GetItem(self.numbers, cls)
            if hit == NULL:
                number = values.struct_number(cls)
                self.numbers[cls] = -1 if number is None else number
                hit = PyDict_GetItem(self.numbers, cls)
            if <object>hit == -1:
                out.byte(STRUCT_NAMED)
                self.value(out, cls.__name__, strings)
                self.value(out, cls._fields, strings)
            else:
                out.byte(STRUCT)
                out.varint(<object>hit)
            self.items(out, v, strings)
        elif cls is tuple:
            out.byte(TUPLE)
            self.items(out, v, strings)
        else:
            hit = PyDict_GetItem(self.place, cls)
            if hit != NULL:
                out.byte(RECORD)
                out.varint(<object>hit)
                fields = self.getters[<Py_ssize_t><object>hit](v)
                for i in range(PyTuple_GET_SIZE(fields)):
                    self.value(out, <object>PyTuple_GET_ITEM(fields, i), strings)
            elif cls is float:
                d = PyFloat_AS_DOUBLE(v)
                out.byte(FLOAT)
                out.raw(<const char *>&d, 8)
            elif cls is bytes:
                out.byte(BYTES)
                out.varint(PyBytes_GET_SIZE(v))
                out.blob(v)
            elif cls is list:
                n = PyList_GET_SIZE(v)
                out.byte(LIST)
                out.varint(n)
                for i in range(n):
                    self.value(out, <object>PyList_GET_ITEM(v, i), strings)
            elif cls is _UUID:
                out.byte(UUID)
                out.blob(v.bytes)
            elif cls is dict:
                out.byte(DICT)
                out.varint(len(v))
                for key, item in (<dict>v).items():
                    self.value(out, key, strings)
                    self.value(out, item, strings)
            elif cls is frozenset or cls is set:
                out.byte(FROZENSET if cls is frozenset else SET)
                out.varint(len(v))
                for item in v:
                    self.value(out, item, strings)
            else:
                data = pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
                out.byte(PICKLED)
                out.varint(PyBytes_GET_SIZE(data))
                out.blob(data)
        return 0

    cdef object struct_class(self, Py_ssize_t number):
        cdef list known = self.by_number
        if number < len(known):
            cls = known[number]
            if cls is not None:
                return cls
        cls = values.numbered_class(number)
        if number >= len(known):
            known.extend([None] * (number + 1 - len(known)))
        known[number] = cls
        return cls

    cdef int items(self, _Out out, object v, dict strings) except -1:
        """A tuple's (or a Struct's) count and items."""
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(v)
        out.varint(n)
        for i in range(n):
            self.value(out, <object>PyTuple_GET_ITEM(v, i), strings)
        return 0

    def unpack(self, bytes blob, dict names=None):
        cdef _In reader = _In(self, blob)
        reader.names = names
        if reader.n == 0 or reader.p[0] != MAGIC:
            raise ValueError("not a packed value")
        reader.at = 1
        obj = reader.value()
        if reader.at != reader.n:
            raise ValueError("bytes after the packed value")
        return obj


cdef int _big(_Out out, object v) except -1:
    """An integer beyond 64 bits, as the reference writes it."""
    z = v << 1 if v >= 0 else ((-v) << 1) - 1
    while z >= 0x80:
        out.byte((z & 0x7F) | 0x80)
        z >>= 7
    out.byte(z)
    return 0


cdef class _In:
    cdef Codec codec
    cdef bytes blob
    cdef const unsigned char *p
    cdef Py_ssize_t at, n
    cdef list strings
    cdef dict names

    def __cinit__(self, Codec codec, bytes blob):
        self.codec, self.blob = codec, blob
        self.p = <const unsigned char *>PyBytes_AS_STRING(blob)
        self.n = PyBytes_GET_SIZE(blob)
        self.at = 0
        self.strings = []

    cdef int need(self, Py_ssize_t k) except -1:
        if k < 0 or self.at + k > self.n:
            raise ValueError("a packed value cut short")
        return 0

    cdef unsigned long long varint(self) except? 0xFFFFFFFFFFFFFFFF:
        cdef unsigned long long v = 0
        cdef int shift = 0
        cdef unsigned char b
        while True:
            self.need(1)
            b = self.p[self.at]
            self.at += 1
            if shift >= 63 and (b > 1 or (b & 0x80)):
                raise ValueError("a packed length beyond 64 bits")
            v |= (<unsigned long long>(b & 0x7F)) << shift
            if b < 0x80:
                return v
            shift += 7

    cdef object integer(self):
        """An INT's value: in C up to 9 bytes of varint (63 bits of zigzag), else in Python (`big`)."""
        cdef Py_ssize_t end = self.at
        cdef unsigned long long z
        while end < self.n and self.p[end] >= 0x80:
            end += 1
        if end - self.at >= 9:
            return self.big(self.at)
        z = self.varint()
        if z & 1:
            return PyLong_FromLongLong(-<long long>((z - 1) >> 1) - 1)
        return PyLong_FromLongLong(<long long>(z >> 1))

    cdef object big(self, Py_ssize_t start):
        self.at = start
        z = 0
        shift = 0
        while True:
            self.need(1)
            b = self.p[self.at]
            self.at += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        return z >> 1 if not z & 1 else -((z + 1) >> 1)

    cdef bytes take(self, Py_ssize_t k):
        self.need(k)
        out = PyBytes_FromStringAndSize(<const char *>self.p + self.at, k)
        self.at += k
        return out

    cdef tuple items(self):
        cdef Py_ssize_t n = <Py_ssize_t>self.varint(), i
        if n > self.n - self.at:  # every item takes a byte at least
            raise ValueError("a packed value cut short")
        cdef tuple out = PyTuple_New(n)
        for i in range(n):
            item = self.value()
            Py_INCREF(item)
            PyTuple_SET_ITEM(out, i, item)
        return out

    cdef object value(self):
        cdef unsigned char tag
        cdef Py_ssize_t k, i, at
        cdef double d
        self.need(1)
        tag = self.p[self.at]
        self.at += 1
        if tag == STR:
            k = <Py_ssize_t>self.varint()
            self.need(k)
            text = PyUnicode_DecodeUTF8(<const char *>self.p + self.at, k, "surrogatepass")
            self.at += k
            self.strings.append(text)
            return text
        if tag == STR_AGAIN:
            k = <Py_ssize_t>self.varint()
            if k >= len(self.strings):
                raise ValueError("a packed string number out of range")
            return self.strings[k]
        if tag == INT:
            return self.integer()
        if tag == NONE:
            return None
        if tag == TRUE:
            return True
        if tag == FALSE:
            return False
        if tag == STRUCT:
            cls = self.codec.struct_class(<Py_ssize_t>self.varint())
            return cls(self.items())
        if tag == RECORD:
            k = <Py_ssize_t>self.varint()
            codec = self.codec
            if k >= len(codec.classes):
                raise ValueError("a packed record of an unknown class")
            width = codec.widths[k]
            at = codec.renamed_at[k] if self.names is not None else -1
            args = PyTuple_New(width)
            for i in range(width):
                item = self.value()
                if i == at:
                    item = self.names.get(item, item)
                Py_INCREF(item)
                PyTuple_SET_ITEM(args, i, item)
            return codec.classes[k](*args)
        if tag == TUPLE:
            return self.items()
        if tag == FLOAT:
            self.need(8)
            memcpy(&d, self.p + self.at, 8)
            self.at += 8
            return PyFloat_FromDouble(d)
        if tag == BYTES:
            return self.take(<Py_ssize_t>self.varint())
        if tag == LIST:
            return list(self.items())
        if tag == UUID:
            return _UUID(bytes=self.take(16))
        if tag == DICT:
            k = <Py_ssize_t>self.varint()
            out = {}
            for i in range(k):
                key = self.value()
                out[key] = self.value()
            return out
        if tag == FROZENSET:
            return frozenset(self.items())
        if tag == SET:
            return set(self.items())
        if tag == STRUCT_NAMED:
            name = self.value()
            names = self.value()
            return values.class_by_names(name, names)(self.items())
        if tag == PICKLED:
            return pickle.loads(self.take(<Py_ssize_t>self.varint()))
        raise ValueError(f"unknown tag {tag} in a packed value")


# -- stage 1 of the Spark engine: the walk's segments into their flows' blocks ---------------------------

cdef long long _TRUNCATED = 0x100  # ksniff.capture.packets.TRUNCATED


cdef bytes _flow_of(bytes src, object sport, bytes dst, object dport):
    """The flow's key as the reference makes it: the smaller of src+sport and dst+dport (as byte strings)
    first, each port in two big-endian bytes."""
    cdef char buf[80]
    cdef Py_ssize_t ls = PyBytes_GET_SIZE(src), ld = PyBytes_GET_SIZE(dst), la, lb, m
    cdef long ps = sport, pd = dport
    cdef int c
    if ls > 38 or ld > 38 or ps < 0 or ps > 0xFFFF or pd < 0 or pd > 0xFFFF:  # not an IP address and port
        one, other = src + sport.to_bytes(2, "big"), dst + dport.to_bytes(2, "big")
        return one + other if one <= other else other + one
    la, lb = ls + 2, ld + 2
    cdef char *a = buf
    cdef char *b = buf + 40
    memcpy(a, PyBytes_AS_STRING(src), ls)
    a[ls] = <char>(ps >> 8)
    a[ls + 1] = <char>(ps & 0xFF)
    memcpy(b, PyBytes_AS_STRING(dst), ld)
    b[ld] = <char>(pd >> 8)
    b[ld + 1] = <char>(pd & 0xFF)
    m = la if la < lb else lb
    c = memcmp(a, b, m)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, la + lb)
    cdef char *o = PyBytes_AS_STRING(out)
    if c < 0 or (c == 0 and la <= lb):
        memcpy(o, a, la)
        memcpy(o + la, b, lb)
    else:
        memcpy(o, b, lb)
        memcpy(o + lb, a, la)
    return out


def into_blocks(
    list segs,
    list at,
    Py_ssize_t i,
    double offset,
    object file,
    dict blocks,
    list state,
    Py_ssize_t referred_min,
    long long block_payload,
    Py_ssize_t block_segments,
    long long held_max,
):
    """ksniff.engine.spark_tasks.into_blocks (the reference: what it does and returns) in C."""
    cdef Py_ssize_t n = len(segs)
    cdef double pm = state[0], ts
    cdef long long idx = state[1], held = state[2], size, where, full
    cdef bint referred = state[3]
    cdef tuple seg, row
    cdef list block, rows
    cdef object payload, flow, pm_obj = state[0], ts_obj
    cdef long long flags
    cdef PyObject *found
    try:
        while i < n:
            seg = <tuple> PyList_GET_ITEM(segs, i)
            where = <long long> (<object> PyList_GET_ITEM(at, i)) if at is not None else -1
            i += 1
            ts_obj = seg[0]
            if type(ts_obj) is not float:  # the walk's times are floats; anything else as Python adds it
                if offset:
                    ts_obj = ts_obj + offset
                ts = ts_obj
            else:
                if offset:
                    ts_obj = PyFloat_FromDouble(PyFloat_AS_DOUBLE(ts_obj) + offset)
                ts = PyFloat_AS_DOUBLE(ts_obj)
            if ts > pm:
                pm = ts
                pm_obj = ts_obj
            flow = _flow_of(seg[1], seg[2], seg[3], seg[4])
            flags = seg[7]
            payload = seg[8]
            if flags & _TRUNCATED:
                size = 0
            elif where >= 0 and len(payload) >= referred_min:  # where it lies (`Payloads` reads it there)
                payload = (where, len(payload))
                size = 0
                referred = True
            else:
                payload = bytes(payload)
                size = PyBytes_GET_SIZE(payload)
            found = PyDict_GetItem(blocks, flow)
            if found is NULL:
                rows = []
                block = [0, rows]
                blocks[flow] = block
            else:
                block = <list> found
                rows = <list> PyList_GET_ITEM(block, 1)
            row = (pm_obj, file, idx, ts_obj, seg[1], seg[2], seg[3], seg[4], seg[5], seg[6], seg[7], payload)
            PyList_Append(rows, row)
            full = <long long> (<object> PyList_GET_ITEM(block, 0)) + size
            block[0] = full
            held += size + 100
            idx += 1
            if full >= block_payload or PyList_GET_SIZE(rows) >= block_segments or held >= held_max:
                return i, flow
        return n, None
    finally:
        state[0] = pm_obj
        state[1] = idx
        state[2] = held
        state[3] = referred


# -- stage 2 of the Spark engine: a flow's segments onto the reassembler's lists -------------------------

def into_lists(segments, Py_ssize_t lo, Py_ssize_t hi, list taken, list clocks, list positions):
    """ksniff.engine.spark_tasks.into_lists (the reference: what it does) in C."""
    cdef Py_ssize_t i, k
    cdef tuple seg, rest
    cdef object pm, idx
    if type(segments) is not tuple and type(segments) is not list:
        segments = list(segments)
    for i in range(lo, hi):
        seg = <tuple> segments[i]
        k = PyTuple_GET_SIZE(seg)
        rest = seg[3:k]
        pm = seg[0]
        PyList_Append(taken, rest)
        PyList_Append(clocks, pm)
        idx = seg[2]
        PyList_Append(positions, (pm, seg[1], 2 * idx + 1))


def with_views(segments, object view, Py_ssize_t low):
    """The segments of a block (SEGMENTS) with each payload that refers to the file ((where, length), a
    tuple) as that part of `view`, the file's bytes from `low`: `Payloads`' one read of a block's span,
    in C (ksniff.engine.spark_tasks.with_views is the reference)."""
    cdef list out = []
    cdef tuple seg, ref
    cdef object payload
    cdef Py_ssize_t at, n
    for seg in segments:
        payload = seg[11]
        if type(payload) is tuple:
            ref = <tuple> payload
            at = <Py_ssize_t> ref[0] - low
            n = ref[1]
            seg = seg[:11] + (view[at : at + n],)
        PyList_Append(out, seg)
    return out


def referred(segments):
    """ksniff.engine.spark_tasks.referred (the reference: what it gives) in C."""
    cdef tuple seg, ref, first = None, last = None
    cdef object payload, own = 0
    for seg in segments:
        payload = seg[11]
        if type(payload) is tuple:
            ref = <tuple> payload
            if first is None:
                first = ref
            last = ref
            own += ref[1]
    if first is None:
        return None
    return first[0], last[0] + last[1], own
