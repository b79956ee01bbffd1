# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled body reader: a message body of one (API, version, direction) read by walking a program
made from the same tables as the generated decoders (ksniff.decode.compiled), in C.

The program (`Program`, made by `compiled.fast_decoder_for`) lists the struct's fields as the generated
decoder reads them: a constant for a field absent at that version or tagged, a fixed-size number, a
string, bytes, a UUID, record batches, an array or a nested struct. Values are built as the generated
decoder builds them (the same Struct classes, the same ints, strings, bytes and tuples; record batches by
the same parse function), so the two give equal bodies. A struct's tagged fields are read here too
(`Program.tags`: each known tag's place and how its value is read; an unknown tag kept with its bytes, in
the order met), as the generated decoder reads them: a broker may end every answer with one (Tansu,
the corpus's broker, ends each Fetch answer of v16+ with node endpoints, most often none; Apache Kafka
writes a tag when its value is not the default: a new leader's endpoints, the features in ApiVersions).
Only the plain path is here: at the first thing that is not (bytes missing, a bad length or tag, the
item budget passed) the body is read again by the generated decoder, which words the error exactly as
before. The generated decoder is the reference: tests/decode/test_compiled_bodies.py holds the two to
the same results on every body of the corpus and the protocol fixtures.
"""

from cpython.object cimport PyObject
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromUnsignedLong
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from libc.string cimport memcpy

from ksniff.common._slotdesc cimport slot_offset


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)
    PyObject *PyTuple_GET_ITEM(object, Py_ssize_t)
    Py_ssize_t PyTuple_GET_SIZE(object)
    ctypedef struct PyTypeObject
    ctypedef PyObject *(*allocfunc)(PyTypeObject *, Py_ssize_t)
    ctypedef struct TypeAlloc "PyTypeObject":
        allocfunc tp_alloc
    void PyObject_GC_UnTrack(void *op)


# Op kinds (Program entries), as `compiled.fast_decoder_for` writes them.
CONST, FIXED, STRING, BYTES, SECRET, UUID, RECORDS, ARRAY_FIXED, ARRAY_OF, STRUCT = range(10)
cdef enum:
    K_CONST, K_FIXED, K_STRING, K_BYTES, K_SECRET, K_UUID, K_RECORDS, K_ARRAY_FIXED, K_ARRAY_OF, K_STRUCT


class Fallback(Exception):
    """Not the plain path: the generated decoder reads this body."""


cdef object _FALLBACK = Fallback


cdef struct Cursor:
    const unsigned char *p
    Py_ssize_t pos
    Py_ssize_t end
    long long budget  # array elements and record batches the body may still make


cdef class Op:
    cdef public int kind
    cdef public int code  # FIXED, ARRAY_FIXED: the struct format character; ARRAY_OF: the element's Op
    cdef public bint nullable
    cdef public bint wide  # a length prefix of INT32 (bytes, records, arrays) rather than INT16 (strings)
    cdef public object value  # CONST: the value
    cdef public Program sub  # STRUCT: its program
    cdef public Op element  # ARRAY_OF: how each element is read
    cdef public Py_ssize_t min_size  # ARRAY_OF of primitives: bytes per element at least

    def __init__(self, int kind, int code=0, bint nullable=False, bint wide=False, value=None,
                 Program sub=None, Op element=None, Py_ssize_t min_size=1):
        self.kind, self.code, self.nullable, self.wide = kind, code, nullable, wide
        self.value, self.sub, self.element, self.min_size = value, sub, element, min_size


cdef class Program:
    cdef public object cls  # the Struct class made
    cdef public bint flexible
    cdef public tuple ops
    # Of a flexible struct, its tagged fields at this version: tag -> (the field's place, its Op).
    cdef public dict tags
    # Whether `cls(values)` makes nothing but a tuple of `cls` holding the values (a tuple subclass whose
    # construction nobody changed): then the struct is allocated as that and filled in place, without
    # the values' own tuple.
    cdef readonly bint direct

    def __init__(self, cls, bint flexible, tuple ops, dict tags=None):
        self.cls, self.flexible, self.ops = cls, flexible, ops
        self.tags = tags if tags is not None else {}
        self.direct = (
            isinstance(cls, type) and issubclass(cls, tuple) and cls.__new__ is tuple.__new__
            and cls.__init__ is object.__init__ and type(cls).__call__ is type.__call__
        )


cdef inline int _need(Cursor *c, Py_ssize_t n) except -1:
    if c.end - c.pos < n:
        raise _FALLBACK()
    return 0


cdef inline long long _be(const unsigned char *q, int size):
    cdef unsigned long long v = 0
    cdef int i
    for i in range(size):
        v = (v << 8) | q[i]
    return <long long> v


cdef object _fixed(Cursor *c, int code):
    cdef const unsigned char *q
    cdef unsigned long long bits
    cdef double d
    if code == b'b':
        _need(c, 1)
        q = c.p + c.pos
        c.pos += 1
        return PyLong_FromLong(<signed char> q[0])
    if code == b'?':
        _need(c, 1)
        q = c.p + c.pos
        c.pos += 1
        return q[0] != 0
    if code == b'h':
        _need(c, 2)
        q = c.p + c.pos
        c.pos += 2
        return PyLong_FromLong(<short> ((q[0] << 8) | q[1]))
    if code == b'H':
        _need(c, 2)
        q = c.p + c.pos
        c.pos += 2
        return PyLong_FromLong((q[0] << 8) | q[1])
    if code == b'i':
        _need(c, 4)
        q = c.p + c.pos
        c.pos += 4
        return PyLong_FromLong(<int> <unsigned int> _be(q, 4))
    if code == b'I':
        _need(c, 4)
        q = c.p + c.pos
        c.pos += 4
        return PyLong_FromUnsignedLong(<unsigned int> _be(q, 4))
    if code == b'q':
        _need(c, 8)
        q = c.p + c.pos
        c.pos += 8
        return PyLong_FromLongLong(_be(q, 8))
    if code == b'd':
        _need(c, 8)
        q = c.p + c.pos
        c.pos += 8
        bits = <unsigned long long> _be(q, 8)
        memcpy(&d, &bits, 8)
        return PyFloat_FromDouble(d)
    raise _FALLBACK()


cdef Py_ssize_t _uvarint(Cursor *c) except -2:
    """A compact length: the unsigned varint less one (-1: null), as the generated decoder reads it."""
    cdef Py_ssize_t start = c.pos
    cdef unsigned long long result = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if c.pos >= c.end or c.pos - start >= 5:
            raise _FALLBACK()
        b = c.p[c.pos]
        c.pos += 1
        result |= (<unsigned long long> (b & 0x7F)) << shift
        if b < 0x80:
            return <Py_ssize_t> (result & 0xFFFFFFFF) - 1
        shift += 7


cdef Py_ssize_t _length(Cursor *c, bint flexible, bint wide) except -2:
    """A length prefix (-1 for null): uvarint - 1 when flexible, else INT32 (`wide`) or INT16."""
    cdef const unsigned char *q
    if flexible:
        if c.pos < c.end and c.p[c.pos] < 0x80:
            c.pos += 1
            return <Py_ssize_t> c.p[c.pos - 1] - 1
        return _uvarint(c)
    if wide:
        _need(c, 4)
        q = c.p + c.pos
        c.pos += 4
        return <int> <unsigned int> _be(q, 4)
    _need(c, 2)
    q = c.p + c.pos
    c.pos += 2
    return <short> ((q[0] << 8) | q[1])


# The UUIDs read lately, by their bytes: a topic's id comes in every Fetch of v13+ and every Produce of
# v13+, and making a uuid.UUID costs about a microsecond. UUIDs are immutable, so one object serves every
# body that names it; the table is emptied when full, so bytes chosen by a client cannot grow it.
import uuid as _uuid_module

cdef object _UUID = _uuid_module.UUID
cdef dict _uuids = {}
UUIDS_KEPT = 4096


def uuids_kept():
    """How many UUIDs the table holds now."""
    return len(_uuids)


cdef object _value(Op op, Cursor *c, bint flexible, object view, object parse, object make_uuid):
    cdef Py_ssize_t n, i, start
    cdef object v, items, key
    cdef int kind = op.kind
    if kind == K_FIXED:
        return _fixed(c, op.code)
    if kind == K_UUID:
        _need(c, 16)
        key = PyBytes_FromStringAndSize(<const char *> (c.p + c.pos), 16)
        c.pos += 16
        if make_uuid is not _UUID:
            return make_uuid(bytes=key)
        v = _uuids.get(key)
        if v is None:
            v = _UUID(bytes=key)
            if len(_uuids) >= UUIDS_KEPT:
                _uuids.clear()
            _uuids[key] = v
        return v
    if kind == K_STRUCT:
        if op.nullable:
            _need(c, 1)
            if c.p[c.pos] >= 0x80:
                c.pos += 1
                return None
            c.pos += 1
        return _struct(op.sub, c, view, parse, make_uuid)
    n = _length(c, flexible, op.wide)
    if n < 0:
        if n == -1 and op.nullable:
            return None
        raise _FALLBACK()
    if kind == K_STRING:
        if n > c.end - c.pos:
            raise _FALLBACK()
        v = PyUnicode_DecodeUTF8(<const char *> (c.p + c.pos), n, "replace")
        c.pos += n
        return v
    if kind == K_BYTES:
        if n > c.end - c.pos:
            raise _FALLBACK()
        v = PyBytes_FromStringAndSize(<const char *> (c.p + c.pos), n)
        c.pos += n
        return v
    if kind == K_SECRET:
        if n > c.end - c.pos:
            raise _FALLBACK()
        c.pos += n
        return n
    if kind == K_RECORDS:
        if n > c.end - c.pos:
            raise _FALLBACK()
        v = parse(view[c.pos : c.pos + n], c.budget if c.budget > 0 else 0)
        c.budget -= len(v)
        if c.budget < 0:
            raise _FALLBACK()
        c.pos += n
        return v
    if kind == K_ARRAY_FIXED or kind == K_ARRAY_OF:
        if n * op.min_size > c.end - c.pos:
            raise _FALLBACK()
        c.budget -= n
        if c.budget < 0:
            raise _FALLBACK()
        items = PyTuple_New(n)
        for i in range(n):
            if kind == K_ARRAY_FIXED:
                v = _fixed(c, op.code)
            else:
                v = _value(op.element, c, flexible, view, parse, make_uuid)
            Py_INCREF(v)
            PyTuple_SET_ITEM(items, i, v)
        return items
    raise _FALLBACK()


cdef object _struct(Program prog, Cursor *c, object view, object parse, object make_uuid):
    cdef tuple ops = prog.ops
    cdef Py_ssize_t n = len(ops), i
    cdef object values
    cdef object v
    cdef Op op
    cdef bint flexible = prog.flexible
    cdef PyObject *raw
    if prog.direct:  # the struct itself, filled as its values are read (tuple_subtype_new's allocation)
        raw = (<TypeAlloc *> <PyObject *> prog.cls).tp_alloc(<PyTypeObject *> <PyObject *> prog.cls, n + 1)
        if raw is NULL:
            raise MemoryError()
        values = <object> raw
        Py_DECREF(values)  # `values` holds the allocation's own reference now
    else:
        values = PyTuple_New(n + 1)
    for i in range(n):
        op = <Op> ops[i]
        if op.kind == K_CONST:
            v = op.value
        else:
            v = _value(op, c, flexible, view, parse, make_uuid)
        Py_INCREF(v)
        PyTuple_SET_ITEM(values, i, v)
    v = ()
    if flexible:
        # The tagged-field section: nearly always empty (one zero byte).
        if c.pos < c.end and c.p[c.pos] == 0:
            c.pos += 1
        else:
            v = _tagged(prog, c, values, view, parse, make_uuid)
    Py_INCREF(v)
    PyTuple_SET_ITEM(values, n, v)
    if prog.direct:
        return values
    return prog.cls(values)


cdef object _tagged(Program prog, Cursor *c, object values, object view, object parse, object make_uuid):
    """A struct's tagged-field section (`values`: the struct being filled, its known tags' defaults in
    place): each known tag's value read from its own bytes into its place (a later one of the same tag
    wins), the unknown tags as (tag, bytes), returned in the order met. Anything amiss in the section or
    a value (a varint too long, a size past the end, a value past its tag's bytes): the generated
    decoder's, which reads the whole section before any value and words the error."""
    cdef Py_ssize_t count, i, tag, size, place
    cdef Cursor sub
    cdef PyObject *old
    cdef list unknown = None
    cdef object v, hit
    cdef dict tags = prog.tags
    count = _uvarint(c) + 1
    if count > c.end - c.pos:
        raise _FALLBACK()
    for i in range(count):
        tag = _uvarint(c) + 1
        size = _uvarint(c) + 1
        if size > c.end - c.pos:
            raise _FALLBACK()
        hit = tags.get(tag)
        if hit is None:
            if unknown is None:
                unknown = []
            unknown.append((tag, PyBytes_FromStringAndSize(<const char *> (c.p + c.pos), size)))
        else:
            sub.p, sub.pos, sub.end, sub.budget = c.p, c.pos, c.pos + size, c.budget
            v = _value(<Op> (<tuple> hit)[1], &sub, prog.flexible, view, parse, make_uuid)
            c.budget = sub.budget
            place = (<tuple> hit)[0]
            old = PyTuple_GET_ITEM(values, place)
            Py_INCREF(v)
            PyTuple_SET_ITEM(values, place, v)
            Py_XDECREF(old)
        c.pos += size
    return () if unknown is None else tuple(unknown)


cdef class Body:
    """`decode(view, items) -> (Struct, end)` of one (API, version, direction), as the generated
    decoder's: the program in C, the generated decoder (`python`) for every body it does not take."""

    cdef public Program program
    cdef public object python
    cdef object parse
    cdef object make_uuid

    def __init__(self, Program program, python, parse, make_uuid):
        self.program, self.python, self.parse, self.make_uuid = program, python, parse, make_uuid

    def __call__(self, view, long long items):
        cdef Py_buffer buf
        cdef Cursor c
        PyObject_GetBuffer(view, &buf, PyBUF_SIMPLE)
        try:
            c.p = <const unsigned char *> buf.buf
            c.pos = 0
            c.end = buf.len
            c.budget = items
            value = _struct(self.program, &c, view, self.parse, self.make_uuid)
            return value, c.pos
        except Fallback:
            pass
        finally:
            PyBuffer_Release(&buf)
        return self.python(view, items)


# -- struct fields --------------------------------------------------------------------------------------


cdef class Field:
    """A Struct class's field by position (ksniff.decode.values): `struct.name` is the struct's item
    `index`, what `property(itemgetter(index))` gives, without that property's call of the itemgetter
    (an argument tuple and a subscript by an int object per read: a run over many small transactions
    reads about a million fields). Read-only, as the property is."""

    cdef readonly Py_ssize_t index

    def __init__(self, Py_ssize_t index):
        self.index = index

    def __get__(self, obj, objtype):
        if obj is None:
            return self
        if isinstance(obj, tuple) and 0 <= self.index < PyTuple_GET_SIZE(obj):
            return <object> PyTuple_GET_ITEM(obj, self.index)
        return obj[self.index]  # what the itemgetter would say

    def __set__(self, obj, value):
        raise AttributeError("can't set attribute")

    def __delete__(self, obj):
        raise AttributeError("can't delete attribute")


# -- request headers -----------------------------------------------------------------------------------


def request_head(payload, bint flexible):
    """`frames.request_head_python` in C, the same answers: (correlation id, client id, body offset) of a
    request header v1 (v2 when `flexible`: then an empty tagged-field section), or None when it is not
    one. Anything off that plain path (a payload too short for the client id's length, tagged fields)
    goes to the Python function, the reference (tests/decode/test_compiled_bodies.py)."""
    cdef Py_buffer buf
    cdef const unsigned char *p
    cdef Py_ssize_t size, pos = 10
    cdef short n
    cdef object client_id = None
    PyObject_GetBuffer(payload, &buf, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *> buf.buf
        size = buf.len
        if size >= 10:
            n = <short> ((p[8] << 8) | p[9])
            if n >= 0:
                if pos + n > size:
                    return None
                client_id = PyUnicode_DecodeUTF8(<const char *> p + pos, n, "replace")
                pos += n
            elif n != -1:
                return None
            if not flexible:
                return <int> <unsigned int> _be(p + 4, 4), client_id, pos
            if pos < size and p[pos] == 0:  # no tagged fields, as nearly always
                return <int> <unsigned int> _be(p + 4, 4), client_id, pos + 1
    finally:
        PyBuffer_Release(&buf)
    from ksniff.decode.frames import request_head_python

    return request_head_python(payload, flexible)


# -- events made by position ----------------------------------------------------------------------------

cdef enum:
    MAX_MADE = 32  # fields of a class a Maker makes, at most


cdef class Maker:
    """Instances of one `fast_init` class (ksniff.common.codegen) made by position in C: allocated as
    `object.__new__` allocates them, every field's value put into its slot as the class's own `__init__`
    stores them. The class call binds its arguments and runs that `__init__` as a Python function,
    which for the events made per batch and per exchange cost twice what storing the values does. Every
    field is given, in order; the class's `__init__` is the reference (tests/decode/test_compiled_bodies.py
    holds the two to the same objects). `untracked`: the instances are let out of the cyclic collector's
    tracking once made (ksniff.decode.events.made_by_position says when that is right)."""

    cdef Py_ssize_t n
    cdef Py_ssize_t offsets[MAX_MADE]
    cdef PyTypeObject *cls
    cdef readonly type made  # the class
    cdef readonly bint untracked

    def __init__(self, type cls, tuple names, bint untracked=False):
        """TypeError for a field that is not a writable object slot of `cls` itself."""
        if len(names) > MAX_MADE:
            raise TypeError(f"{cls.__name__}: more than {MAX_MADE} fields")
        for i, name in enumerate(names):
            self.offsets[i] = slot_offset(cls, name)
        self.n = len(names)
        self.cls = <PyTypeObject *> cls
        self.made = cls
        self.untracked = untracked

    cdef object make(self, tuple values):
        cdef Py_ssize_t i
        cdef PyObject *value
        cdef PyObject **slot
        cdef PyObject *raw
        if PyTuple_GET_SIZE(values) != self.n:
            raise TypeError(f"{self.made.__name__}: {len(values)} values for {self.n} fields")
        raw = (<TypeAlloc *> self.cls).tp_alloc(self.cls, 0)
        if raw is NULL:
            raise MemoryError()
        made = <object> raw
        Py_DECREF(made)  # `made` holds the allocation's own reference now
        for i in range(self.n):
            value = PyTuple_GET_ITEM(values, i)
            slot = <PyObject **> (<char *> raw + self.offsets[i])
            Py_INCREF(<object> value)
            Py_XDECREF(slot[0])
            slot[0] = value
        if self.untracked:
            PyObject_GC_UnTrack(raw)
        return made

    def __call__(self, *values):
        return self.make(values)


cdef inline object _make(object cls, tuple values):
    """An instance of `cls` (a class, or a Maker of one) from the values of its fields in order."""
    if type(cls) is Maker:
        return (<Maker> cls).make(values)
    return cls(*values)


# -- record batch headers -------------------------------------------------------------------------------


cdef class BatchWalk:
    """`records.parse_batches(view, limit)` in C for the batches of a Produce request or a Fetch answer:
    magic-2 headers read in place, CRC-32C checked by `crc32c`, each header made by `header` (the
    RecordBatchHeader class) with the values the Python walk gives it. A records field holding a batch of
    another magic (0 or 1) or a whole control batch (its marker is read by the Python walk's record
    reader) is walked by `python`, the reference, whole."""

    cdef object header
    cdef object crc32c
    cdef tuple codecs
    cdef public object python

    def __init__(self, header, crc32c, tuple codecs, python):
        self.header, self.crc32c, self.codecs, self.python = header, crc32c, codecs, python

    def __call__(self, view, long long limit=1 << 62):
        cdef Py_buffer buf
        cdef const unsigned char *p
        cdef Py_ssize_t pos = 0, end, batch_end
        cdef long long made = 0
        cdef int batch_length, attributes, codec
        cdef bint whole, control
        cdef list out = []
        PyObject_GetBuffer(view, &buf, PyBUF_SIMPLE)
        try:
            p = <const unsigned char *> buf.buf
            end = buf.len
            while end - pos >= 17:  # up to and including magic
                if made > limit:  # one past the budget made: the caller refuses the body
                    break
                made += 1
                batch_length = <int> <unsigned int> _be(p + pos + 8, 4)
                if batch_length < 0:
                    break
                if p[pos + 16] != 2:
                    if p[pos + 16] <= 1:
                        return self.python(view, limit)  # magic 0/1 message sets
                    break  # not a batch we know: stop rather than guess at the rest
                if end - pos < 61 or batch_length < 49:
                    break
                batch_end = pos + 12 + batch_length
                whole = batch_end <= end
                attributes = <short> ((p[pos + 21] << 8) | p[pos + 22])
                control = (attributes & 0x20) != 0
                if control and whole:
                    return self.python(view, limit)  # the marker of a control batch
                codec = attributes & 0x07
                crc = PyLong_FromUnsignedLong(<unsigned int> _be(p + pos + 17, 4))
                out.append(
                    _make(self.header, (
                        PyLong_FromLongLong(_be(p + pos, 8)),  # base_offset
                        batch_length,
                        <int> <unsigned int> _be(p + pos + 12, 4),  # partition_leader_epoch
                        2,  # magic
                        crc,
                        (self.crc32c(view[pos + 21 : batch_end]) == crc) if whole else None,
                        attributes,
                        <int> <unsigned int> _be(p + pos + 23, 4),  # last_offset_delta
                        PyLong_FromLongLong(_be(p + pos + 27, 8)),  # base_timestamp
                        PyLong_FromLongLong(_be(p + pos + 35, 8)),  # max_timestamp
                        PyLong_FromLongLong(_be(p + pos + 43, 8)),  # producer_id
                        <short> ((p[pos + 51] << 8) | p[pos + 52]),  # producer_epoch
                        <int> <unsigned int> _be(p + pos + 53, 4),  # base_sequence
                        <int> <unsigned int> _be(p + pos + 57, 4),  # records_count
                        self.codecs[codec] if codec < len(self.codecs) else "unknown",
                        (attributes & 0x10) != 0,  # transactional
                        control,
                        None,  # control_type: a control batch here is not whole
                        None,  # coordinator_epoch
                    ))
                )
                pos = batch_end
        finally:
            PyBuffer_Release(&buf)
        return tuple(out)


# -- the batches of a Produce exchange ------------------------------------------------------------------


cdef inline object _field(object struct, Py_ssize_t i):
    return <object> PyTuple_GET_ITEM(struct, i)


cdef inline object _topic_key(object topic, Py_ssize_t name_at, Py_ssize_t id_at, object zero_uuid):
    """A topic's topic id, or its name when it has none (`connection._topic_key`)."""
    topic_id = _field(topic, id_at)
    if topic_id is not None and topic_id is not zero_uuid and topic_id != zero_uuid:
        return topic_id
    return _field(topic, name_at) or ""


cdef class ProducedBatches:
    """`Connection._produced` in C: each record batch of a Produce request with the broker's answer for
    its partition, as ProducedBatch events (`batch`), built from the request's and response's Structs by
    field position. `classes` are the Struct classes it reads (request, topic, partition, response,
    response topic, response partition) and `fields` the positions of the fields it reads in each; a
    body of any other class returns None (the Python method then runs)."""

    cdef tuple classes
    cdef Py_ssize_t r_tid, r_acks, r_topics, t_name, t_id, t_parts, p_index, p_records
    cdef Py_ssize_t s_topics, st_name, st_id, st_parts, sp_index, sp_error, sp_base
    cdef object batch, record_set, zero_uuid

    def __init__(self, tuple classes, tuple fields, batch, record_set, zero_uuid):
        (self.r_tid, self.r_acks, self.r_topics, self.t_name, self.t_id, self.t_parts, self.p_index,
         self.p_records, self.s_topics, self.st_name, self.st_id, self.st_parts, self.sp_index,
         self.sp_error, self.sp_base) = fields
        self.classes, self.batch, self.record_set, self.zero_uuid = classes, batch, record_set, zero_uuid

    def __call__(self, request, response, dict names, tuple head, response_ts, unverified):
        """`head`: (ts, conn, client, broker, client_id, correlation_id, api_version) of the exchange."""
        cdef dict answers = {}
        cdef list out = []
        cdef Py_ssize_t i, n_raw
        if type(request) is not self.classes[0] or (
            response is not None and type(response) is not self.classes[3]
        ):
            return None
        ts, conn, client, broker, client_id, correlation_id, api_version = head
        if response is not None:
            for topic in _field(response, self.s_topics) or ():
                if type(topic) is not self.classes[4]:
                    return None
                key = _topic_key(topic, self.st_name, self.st_id, self.zero_uuid)
                for part in _field(topic, self.st_parts) or ():
                    if type(part) is not self.classes[5]:
                        return None
                    answers[(key, _field(part, self.sp_index))] = part
        transactional_id = _field(request, self.r_tid)
        acks = _field(request, self.r_acks)
        for topic in _field(request, self.r_topics) or ():
            if type(topic) is not self.classes[1]:
                return None
            key = _topic_key(topic, self.t_name, self.t_id, self.zero_uuid)
            topic_name = key if isinstance(key, str) else names.get(key, str(key))
            for part in _field(topic, self.t_parts) or ():
                if type(part) is not self.classes[2]:
                    return None
                index = _field(part, self.p_index)
                answer = answers.get((key, index))
                error_code = None if answer is None else _field(answer, self.sp_error)
                next_offset = None
                if answer is not None and error_code == 0 and _field(answer, self.sp_base) >= 0:
                    next_offset = _field(answer, self.sp_base)
                records = _field(part, self.p_records) or ()
                raw = records.raw if type(records) is self.record_set else ()
                n_raw = len(raw)
                i = 0
                for header in records:
                    out.append(
                        _make(self.batch, (
                            ts,
                            response_ts,
                            conn,
                            client,
                            broker,
                            client_id,
                            correlation_id,
                            api_version,
                            transactional_id,
                            acks,
                            topic_name,
                            index,
                            header,
                            error_code,
                            next_offset,
                            unverified,
                            raw[i] if i < n_raw else None,
                        ))
                    )
                    # Several batches for one partition: each later one starts where the previous ends.
                    if next_offset is not None:
                        next_offset += header.last_offset_delta + 1
                    i += 1
        return tuple(out)


# -- the partitions of a Fetch exchange -----------------------------------------------------------------


cdef class FetchedPartitions:
    """`Connection._fetched` in C: each partition of a Fetch answer with the offset its request asked it
    from, as FetchedPartition events (`made`), built from the request's and response's Structs by field
    position. `classes` are the Struct classes it reads (request, topic, partition, response, response
    topic, response partition, aborted transaction, replica state) and `fields` the positions of the
    fields it reads in each; a body of any other class returns None (the Python method then runs)."""

    cdef tuple classes
    cdef Py_ssize_t r_topics, r_replica, r_state, r_isolation, r_session, r_epoch, t_name, t_id, t_parts
    cdef Py_ssize_t p_index, p_offset, s_topics, st_name, st_id, st_parts, sp_index, sp_error, sp_hw
    cdef Py_ssize_t sp_lso, sp_start, sp_aborted, sp_records, a_pid, a_first, rs_replica
    cdef object made, zero_uuid

    def __init__(self, tuple classes, tuple fields, made, zero_uuid):
        (self.r_topics, self.r_replica, self.r_state, self.r_isolation, self.r_session, self.r_epoch,
         self.t_name, self.t_id, self.t_parts, self.p_index, self.p_offset, self.s_topics, self.st_name,
         self.st_id, self.st_parts, self.sp_index, self.sp_error, self.sp_hw, self.sp_lso, self.sp_start,
         self.sp_aborted, self.sp_records, self.a_pid, self.a_first, self.rs_replica) = fields
        self.classes, self.made, self.zero_uuid = classes, made, zero_uuid

    def __call__(self, request, response, dict names, tuple head, response_ts, unverified):
        """`head`: (ts, conn, client, broker, client_id, correlation_id, api_version) of the exchange."""
        cdef dict asked = {}
        cdef list out = []
        cdef list pairs
        cdef tuple classes = self.classes
        if type(request) is not classes[0] or type(response) is not classes[3]:
            return None
        for topic in _field(request, self.r_topics):
            if type(topic) is not classes[1]:
                return None
            key = _topic_key(topic, self.t_name, self.t_id, self.zero_uuid)
            for part in _field(topic, self.t_parts):
                if type(part) is not classes[2]:
                    return None
                asked[(key, _field(part, self.p_index))] = _field(part, self.p_offset)
        ts, conn, client, broker, client_id, correlation_id, api_version = head
        replica_id = _field(request, self.r_replica)
        if api_version >= 15:
            state = _field(request, self.r_state)
            if state is not None:
                if type(state) is not classes[7]:
                    return None
                replica_id = _field(state, self.rs_replica)
        isolation = _field(request, self.r_isolation)
        session = _field(request, self.r_session)
        session_epoch = _field(request, self.r_epoch)
        for topic in _field(response, self.s_topics):
            if type(topic) is not classes[4]:
                return None
            key = _topic_key(topic, self.st_name, self.st_id, self.zero_uuid)
            name = key if isinstance(key, str) else names.get(key, str(key))
            for part in _field(topic, self.st_parts):
                if type(part) is not classes[5]:
                    return None
                aborted = _field(part, self.sp_aborted)
                if aborted is not None:
                    pairs = []
                    for a in aborted:
                        if type(a) is not classes[6]:
                            return None
                        pairs.append((_field(a, self.a_pid), _field(a, self.a_first)))
                    aborted = tuple(pairs)
                index = _field(part, self.sp_index)
                out.append(
                    _make(self.made, (
                        ts,
                        response_ts,
                        conn,
                        client,
                        broker,
                        client_id,
                        correlation_id,
                        api_version,
                        replica_id,
                        isolation,
                        session,
                        session_epoch,
                        name,
                        index,
                        asked.get((key, index)),
                        _field(part, self.sp_error),
                        _field(part, self.sp_hw),
                        _field(part, self.sp_lso),
                        _field(part, self.sp_start),
                        aborted,
                        _field(part, self.sp_records) or (),
                        unverified,
                    ))
                )
        return tuple(out)
