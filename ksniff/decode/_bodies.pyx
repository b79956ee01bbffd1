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
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromUnsignedLong
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from libc.string cimport memcpy

from ksniff.common._slotdesc cimport slot_get as _get, slot_offset, slot_put as _put


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
    # Whether record batches are read anywhere in the struct (its fields', elements' and tags'): the
    # only values made from views of the bytes rather than from the bytes themselves.
    cdef readonly bint records

    def __init__(self, cls, bint flexible, tuple ops, dict tags=None):
        self.cls, self.flexible, self.ops = cls, flexible, ops
        self.tags = tags if tags is not None else {}
        self.records = any(_reads_records(op) for op in ops) or any(
            _reads_records(hit[1]) for hit in self.tags.values()
        )
        self.direct = (
            isinstance(cls, type) and issubclass(cls, tuple) and cls.__new__ is tuple.__new__
            and cls.__init__ is object.__init__ and type(cls).__call__ is type.__call__
        )


cdef bint _reads_records(Op op):
    if op.kind == K_RECORDS:
        return True
    if op.kind == K_STRUCT:
        return op.sub.records
    if op.kind == K_ARRAY_OF:
        return _reads_records(op.element)
    return False


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


cdef Py_ssize_t _length(Cursor *c, bint flexible, bint wide) except? -2:
    """A length prefix (-1 for null): uvarint - 1 when flexible, else INT32 (`wide`) or INT16. Any negative
    length can be read (a hostile -2 too), so -2 says an exception was raised only when one was: `except?`
    (`except -2` took a length of -2 for an error without an exception, which came out as a SystemError)."""
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


# -- the per-frame path ---------------------------------------------------------------------------------


cdef inline void _add(object obj, Py_ssize_t offset, object n):
    _put(obj, offset, _get(obj, offset) + n)


cdef tuple _time_at(tuple marks, Py_ssize_t m, object ts, object at):
    """`frames._time_at`: the capture time of stream offset `at`, given `ts` before marks[m:], and the
    index of the first mark after `at` (a mark: (stream offset, capture time), in stream order)."""
    cdef Py_ssize_t after = m, n = len(marks)
    while after < n and not (at < marks[after][0]):
        after += 1
    return (marks[after - 1][1] if after > m else ts), after


cdef enum:
    PRODUCE_KEY = 0
    FETCH_KEY = 1
    METADATA_KEY = 3


cdef class _Run:
    """What the lane reads of a connection's context (FrameLane._run), kept on the connection (its `lane`
    slot): nothing of it is kept in the lane itself, which every decoder and thread of the process share."""

    cdef object ctx, stats
    cdef dict plans
    cdef long long max_body_items
    cdef Py_ssize_t max_in_flight


cdef class FrameLane:
    """`Connection.chunk`'s usual case in C (ksniff.decode.connection): a chunk of whole frames (one, or
    several a client pipelined or a broker answered together) with nothing held before it, each frame read
    as the connection's `_request` or `_response` reads it, with the times `FrameSplitter.split` gives it,
    the exchange made and emitted as `_emit` and `_exchange` make it, on the same objects (the
    connection's, its splitters', the version plan's and the counters' slots read and written in place).
    Anything off that path goes to the Python methods: the whole chunk before anything changed (a frame
    cut across chunks, bytes held, resynchronisation), or the one frame at the step where it leaves the
    path (an unknown version, a header with tagged fields, an answer nobody asked for). The methods are
    the reference: tests/decode/test_compiled_lane.py holds the two to the same events and counters.
    Python's interpreter ran these few hundred steps per frame at 18% of a run over many small
    transactions (bench/README.md, "The per-frame path in C")."""

    cdef type conn_cls, splitter_cls, pending_cls, plan_cls, counts_cls, stats_cls, chunk_cls
    cdef Py_ssize_t c_ctx, c_conn, c_client, c_broker, c_client_is_src, c_pending, c_seq, c_moved, c_lane
    cdef Py_ssize_t c_last_correlation, c_unverified, c_last_ts, c_requests, c_responses
    cdef Py_ssize_t e_conn, e_from_src, e_offset, e_data, e_first_ts, e_last_ts, e_marks
    cdef Py_ssize_t s_buf, s_syncing, s_confirm_at, s_min_size, s_max_frame, s_next_offset
    cdef Py_ssize_t p_seq, p_api, p_api_key, p_api_name, p_api_version, p_correlation_id, p_client_id
    cdef Py_ssize_t p_body, p_decode_error, p_first_ts, p_last_ts, p_unverified, p_plan
    cdef Py_ssize_t v_api, v_name, v_request_flexible, v_response_flexible, v_counts, v_request, v_response
    cdef Py_ssize_t n_requests, n_responses, n_exchanges
    cdef Py_ssize_t t_requests, t_responses, t_exchanges, t_errors, t_unmatched, t_evicted
    cdef Maker pending_maker, exchange_maker
    cdef object produced, fetched, damage

    def __init__(self, type chunk_cls, type conn_cls, type splitter_cls, type pending_cls, type plan_cls,
                 type counts_cls, type stats_cls, Maker pending_maker, Maker exchange_maker, produced, fetched,
                 damage):
        """TypeError when a class's fields are not the slots read here (the Python path then runs)."""
        self.chunk_cls = chunk_cls
        e = chunk_cls
        self.e_conn, self.e_from_src, self.e_offset = slot_offset(e, "conn"), slot_offset(e, "from_src"), slot_offset(e, "offset")
        self.e_data, self.e_marks = slot_offset(e, "data"), slot_offset(e, "marks")
        self.e_first_ts, self.e_last_ts = slot_offset(e, "first_ts"), slot_offset(e, "last_ts")
        self.conn_cls, self.splitter_cls, self.pending_cls = conn_cls, splitter_cls, pending_cls
        self.plan_cls, self.counts_cls, self.stats_cls = plan_cls, counts_cls, stats_cls
        if pending_maker.made is not pending_cls:
            raise TypeError("the pending maker makes another class")
        self.pending_maker, self.exchange_maker = pending_maker, exchange_maker
        self.produced, self.fetched, self.damage = produced, fetched, damage
        c = conn_cls
        self.c_ctx, self.c_conn = slot_offset(c, "ctx"), slot_offset(c, "conn")
        self.c_client, self.c_broker = slot_offset(c, "client"), slot_offset(c, "broker")
        self.c_client_is_src, self.c_pending = slot_offset(c, "client_is_src"), slot_offset(c, "pending")
        self.c_seq, self.c_last_correlation = slot_offset(c, "seq"), slot_offset(c, "last_correlation")
        self.c_unverified, self.c_last_ts = slot_offset(c, "unverified"), slot_offset(c, "last_ts")
        self.c_requests, self.c_responses = slot_offset(c, "requests"), slot_offset(c, "responses")
        self.c_moved, self.c_lane = slot_offset(c, "moved"), slot_offset(c, "lane")
        s = splitter_cls
        self.s_buf, self.s_syncing = slot_offset(s, "buf"), slot_offset(s, "syncing")
        self.s_confirm_at, self.s_min_size = slot_offset(s, "confirm_at"), slot_offset(s, "min_size")
        self.s_max_frame, self.s_next_offset = slot_offset(s, "max_frame"), slot_offset(s, "next_offset")
        p = pending_cls
        self.p_seq, self.p_api, self.p_api_key = slot_offset(p, "seq"), slot_offset(p, "api"), slot_offset(p, "api_key")
        self.p_api_name, self.p_api_version = slot_offset(p, "api_name"), slot_offset(p, "api_version")
        self.p_correlation_id, self.p_client_id = slot_offset(p, "correlation_id"), slot_offset(p, "client_id")
        self.p_body, self.p_decode_error = slot_offset(p, "body"), slot_offset(p, "decode_error")
        self.p_first_ts, self.p_last_ts = slot_offset(p, "first_ts"), slot_offset(p, "last_ts")
        self.p_unverified, self.p_plan = slot_offset(p, "unverified"), slot_offset(p, "plan")
        v = plan_cls
        self.v_api, self.v_name, self.v_counts = slot_offset(v, "api"), slot_offset(v, "name"), slot_offset(v, "counts")
        self.v_request_flexible = slot_offset(v, "request_flexible")
        self.v_response_flexible = slot_offset(v, "response_flexible")
        self.v_request, self.v_response = slot_offset(v, "request"), slot_offset(v, "response")
        n = counts_cls
        self.n_requests, self.n_responses = slot_offset(n, "requests"), slot_offset(n, "responses")
        self.n_exchanges = slot_offset(n, "exchanges")
        t = stats_cls
        self.t_requests, self.t_responses = slot_offset(t, "requests"), slot_offset(t, "responses")
        self.t_exchanges, self.t_errors = slot_offset(t, "exchanges"), slot_offset(t, "errors")
        self.t_unmatched = slot_offset(t, "unmatched_requests")
        self.t_evicted = slot_offset(t, "in_flight_evicted")

    cdef _Run _run(self, object conn):
        """What the lane reads of `conn`'s context (its counters, its version plans, its caps), read once
        and kept on the connection; None when its counters are not of the classes read here."""
        cdef _Run x
        kept = _get(conn, self.c_lane)
        if kept is not None:
            return <_Run?> kept
        ctx = _get(conn, self.c_ctx)
        stats, plans = ctx.stats, ctx.plans
        if type(stats) is not self.stats_cls or type(plans) is not dict:
            return None
        x = _Run.__new__(_Run)
        x.ctx, x.plans, x.stats = ctx, <dict> plans, stats
        x.max_body_items, x.max_in_flight = ctx.max_body_items, ctx.max_in_flight
        _put(conn, self.c_lane, x)
        return x

    def feed(self, decoder, event):
        """`Decoder.feed` of a chunk of one of `decoder`'s connections that `chunk` takes: the run-wide
        totals moved and their caps checked as there. None for any other event or chunk (nothing changed
        then: `Decoder.feed`'s Python takes it)."""
        if type(event) is not self.chunk_cls:
            return None
        c = (<dict?> decoder._conns).get(_get(event, self.e_conn))
        if type(c) is not self.conn_cls:
            return None
        waiting = _get(c, self.c_pending)
        before = len(waiting)
        out = self.chunk(
            c, _get(event, self.e_from_src), _get(event, self.e_data), _get(event, self.e_first_ts),
            _get(event, self.e_last_ts), _get(event, self.e_offset), _get(event, self.e_marks),
        )
        if out is None:
            return None
        in_flight = decoder._in_flight + (len(waiting) - before)
        decoder._in_flight = in_flight
        moved = _get(c, self.c_moved)
        if moved:
            decoder._partial += moved
            _put(c, self.c_moved, 0)
        if decoder._partial > decoder.max_partial_total or in_flight > decoder.max_in_flight_total:
            return decoder._account(c, 0, 0, out, True)
        return out

    def chunk(self, conn, from_src, data, first_ts, last_ts, offset, marks):
        """The events of the chunk as `conn.chunk` gives them, or None when the chunk is not whole frames
        with nothing held (nothing changed then: `conn.chunk` takes it)."""
        cdef Py_ssize_t n, pos, stop, frames = 0
        cdef long long size, low, high
        cdef const unsigned char *q
        cdef _Run x
        if type(conn) is not self.conn_cls or type(data) is not bytes or type(marks) is not tuple:
            return None
        to_broker = from_src == _get(conn, self.c_client_is_src)
        splitter = _get(conn, self.c_requests if to_broker else self.c_responses)
        if type(splitter) is not self.splitter_cls or _get(splitter, self.s_buf):
            return None
        if _get(splitter, self.s_syncing) or _get(splitter, self.s_confirm_at) is not None:
            return None
        n = PyBytes_GET_SIZE(data)
        q = <const unsigned char *> PyBytes_AS_STRING(data)
        low, high = _get(splitter, self.s_min_size), _get(splitter, self.s_max_frame)
        # Whole frames end to end, each of a size the splitter takes (FrameSplitter.split's loop over them
        # would find nothing else to do), or else nothing here.
        pos = 0
        while pos < n:
            if n - pos < 4:
                return None
            size = <int> <unsigned int> _be(q + pos, 4)
            if size < low or size > high or size > n - pos - 4:
                return None
            pos += 4 + size
            frames += 1
        if frames == 0:
            return None
        x = self._run(conn)
        if x is None:
            return None
        out = []
        _put(conn, self.c_last_ts, last_ts)
        _put(splitter, self.s_next_offset, offset + n)
        if frames == 1:  # Connection.chunk's own case: the chunk's times are the frame's
            if to_broker:
                self._request(x, conn, data, 0, n, first_ts, last_ts, out)
            else:
                self._response(x, conn, data, 0, n, last_ts, out)
            return out
        # Several frames: each with the times of the segments carrying its first and last bytes, as
        # FrameSplitter.split gives them (all frames split before any is read, as there).
        times = []
        ts, m, n_marks = first_ts, 0, len(marks)
        pos = 0
        while pos < n:
            stop = pos + 4 + <int> <unsigned int> _be(q + pos, 4)
            if m < n_marks and marks[m][0] < offset + stop:
                frame_first, m = _time_at(<tuple> marks, m, ts, offset + pos)
                if m < n_marks and marks[m][0] < offset + stop:
                    ts, m = _time_at(<tuple> marks, m, frame_first, offset + stop - 1)
                else:
                    ts = frame_first
            else:
                frame_first = ts
            times.append((pos, stop, frame_first, ts))
            pos = stop
        for at, stop, frame_first, frame_last in times:
            if to_broker:
                self._request(x, conn, data, at, stop, frame_first, frame_last, out)
            else:
                self._response(x, conn, data, at, stop, frame_last, out)
        return out

    cdef _body(self, _Run x, object decode, object api, object version, bint is_request, object data,
               Py_ssize_t start, Py_ssize_t stop, object counts):
        """(body, error) of the body at data[start:stop], as the connection's inline `ctx.run` reads it:
        the compiled program over the chunk's bytes where `decode` is one."""
        cdef Cursor c
        cdef Body b
        if type(decode) is Body:
            b = <Body> decode
            # The bytes as the program's record batches are read from (views of them), when it has any.
            whole = memoryview(data) if b.program.records else data
            c.p = <const unsigned char *> PyBytes_AS_STRING(data)
            c.pos = start
            c.end = stop
            c.budget = x.max_body_items
            try:
                body = _struct(b.program, &c, whole, b.parse, b.make_uuid)
            except Exception:
                pass  # off the plain path (or an error): read again as `Body.__call__` and `ctx.run` do
            else:
                if c.pos != stop:
                    x.ctx.leftover(stop - c.pos, counts)
                return body, None
        view = memoryview(data)[start:stop]
        try:
            body, end = decode(view, x.max_body_items)
        except Exception:
            return x.ctx.run(decode, api, version, is_request, view)
        if end != len(view):
            x.ctx.leftover(len(view) - end, counts)
        return body, None

    cdef _request(self, _Run x, conn, data, Py_ssize_t at, Py_ssize_t stop, first_ts, last_ts, list out):
        """`Connection._request` of the frame at data[at:stop] (its size first)."""
        cdef const unsigned char *q = <const unsigned char *> PyBytes_AS_STRING(data) + at + 4
        cdef Py_ssize_t size = stop - at - 4, pos = 10
        cdef short length
        cdef int api_key, api_version, correlation_id
        if size < 10:
            conn._request(memoryview(data)[at + 4 : stop], first_ts, last_ts, out)
            return
        api_key = <short> ((q[0] << 8) | q[1])
        api_version = <short> ((q[2] << 8) | q[3])
        plan = x.plans.get((api_key, api_version))
        if type(plan) is not self.plan_cls:
            conn._request(memoryview(data)[at + 4 : stop], first_ts, last_ts, out)
            return
        counts = _get(plan, self.v_counts)
        # The request header's plain path (request_head's): anything else is the Python method's.
        client_id = None
        length = <short> ((q[8] << 8) | q[9])
        if length >= 0:
            if pos + length > size:
                conn._request(memoryview(data)[at + 4 : stop], first_ts, last_ts, out)
                return
            client_id = PyUnicode_DecodeUTF8(<const char *> q + pos, length, "replace")
            pos += length
        elif length != -1:
            conn._request(memoryview(data)[at + 4 : stop], first_ts, last_ts, out)
            return
        if _get(plan, self.v_request_flexible):
            if pos >= size or q[pos] != 0 or type(counts) is not self.counts_cls:
                conn._request(memoryview(data)[at + 4 : stop], first_ts, last_ts, out)
                return
            pos += 1
        elif type(counts) is not self.counts_cls:
            conn._request(memoryview(data)[at + 4 : stop], first_ts, last_ts, out)
            return
        correlation_id = <int> <unsigned int> _be(q + 4, 4)
        api = _get(plan, self.v_api)
        version = api_version
        _add(counts, self.n_requests, 1)
        _add(x.stats, self.t_requests, 1)
        body, error = self._body(x, _get(plan, self.v_request), api, version, True, data, at + 4 + pos, stop, counts)
        if error is not None:
            counts.not_decoded(error)
        cid = correlation_id
        _put(conn, self.c_last_correlation, cid)
        seq = _get(conn, self.c_seq) + 1
        _put(conn, self.c_seq, seq)
        pending = self.pending_maker.make((
            seq,
            api,
            api_key,
            _get(plan, self.v_name),
            version,
            cid,
            client_id,
            body,
            error,
            first_ts,
            last_ts,
            _get(conn, self.c_unverified),
            plan,
        ))
        if api_key == PRODUCE_KEY and body is not None and getattr(body, "acks", None) == 0:
            self._emit(x, conn, out, pending, None, None, None, "no_response")
            return
        waiting = <dict?> _get(conn, self.c_pending)
        if cid in waiting:  # a reused correlation id: the older request was never answered
            self._unanswered(x, conn, waiting.pop(cid), out)
        waiting[cid] = pending
        if len(waiting) > x.max_in_flight:
            _add(x.stats, self.t_evicted, 1)
            self._unanswered(x, conn, waiting.pop(next(iter(waiting))), out)

    cdef _unanswered(self, _Run x, conn, p, list out):
        _add(x.stats, self.t_unmatched, 1)
        self._emit(x, conn, out, p, None, None, None, "unanswered")

    cdef _response(self, _Run x, conn, data, Py_ssize_t at, Py_ssize_t stop, last_ts, list out):
        """`Connection._response` of the frame at data[at:stop] (its size first)."""
        cdef const unsigned char *q = <const unsigned char *> PyBytes_AS_STRING(data) + at + 4
        cdef Py_ssize_t size = stop - at - 4, start
        waiting = <dict?> _get(conn, self.c_pending)
        cid = <int> <unsigned int> _be(q, 4)
        pending = waiting.get(cid)
        if type(pending) is not self.pending_cls:  # unmatched (or not of the class read here)
            conn._response(memoryview(data)[at + 4 : stop], last_ts, out)
            return
        plan = _get(pending, self.p_plan)
        if type(plan) is not self.plan_cls:
            conn._response(memoryview(data)[at + 4 : stop], last_ts, out)
            return
        counts = _get(plan, self.v_counts)
        if type(counts) is not self.counts_cls:
            conn._response(memoryview(data)[at + 4 : stop], last_ts, out)
            return
        if not _get(plan, self.v_response_flexible):
            start = at + 8
        elif size > 4 and q[4] == 0:
            start = at + 9
        else:  # tagged fields in the response header
            conn._response(memoryview(data)[at + 4 : stop], last_ts, out)
            return
        _add(x.stats, self.t_responses, 1)
        del waiting[cid]
        # Kafka answers in order: whatever was sent before this request will never be answered now.
        seq = _get(pending, self.p_seq)
        while waiting:
            first = next(iter(waiting.values()))
            if first.seq > seq:
                break
            self._unanswered(x, conn, waiting.pop(first.correlation_id), out)
        _add(counts, self.n_responses, 1)
        _add(counts, self.n_exchanges, 1)
        _add(x.stats, self.t_exchanges, 1)
        body, error = self._body(
            x, _get(plan, self.v_response), _get(pending, self.p_api), _get(pending, self.p_api_version),
            False, data, start, stop, counts,
        )
        if error is not None:
            counts.not_decoded(error)
        if body is not None and _get(pending, self.p_api_key) == METADATA_KEY:
            conn._learn_topic_ids(body)
        self._emit(x, conn, out, pending, body, error, last_ts, "ok")

    cdef _emit(self, _Run x, conn, list out, p, response, response_error, response_ts, status):
        """`Connection._emit`: the exchange into `out`, after what it shows was damaged (`damage`)."""
        if type(p) is not self.pending_cls:
            conn._emit(out, p, response, response_error, response_ts, status)
            return
        ex = self._exchange(x, conn, p, response, response_error, response_ts, status)
        if ex.decode_error is None and not ex.fetched:
            batches = ex.batches
            if not batches:
                out.append(ex)  # the usual case
                return
            answered = response is not None
            for b in batches:
                if b.header.crc_ok is False or (answered and b.error_code is None):
                    break
            else:
                out.append(ex)
                return
        lost = self.damage(ex)
        if lost is not None:
            if lost.damaged == "malformed" and ex.decode_error is None:  # an answer that does not fit
                _add(x.stats, self.t_errors, 1)
            out.append(lost)
            if not _get(conn, self.c_unverified):
                _put(conn, self.c_unverified, True)
                ex = self._exchange(x, conn, p, response, response_error, response_ts, status)
        out.append(ex)

    cdef _exchange(self, _Run x, conn, p, response, response_error, response_ts, status):
        """`Connection._exchange`, of a Pending `p`."""
        error = _get(p, self.p_decode_error)
        if response_error is not None and response_error != error:
            error = response_error if error is None else f"{error}; response {response_error}"
        unverified = _get(p, self.p_unverified) or _get(conn, self.c_unverified)
        batches = ()
        fetched = ()
        api_key = _get(p, self.p_api_key)
        body = _get(p, self.p_body)
        if api_key == PRODUCE_KEY and body is not None:
            made = None
            if self.produced is not None:
                made = self.produced(body, response, x.ctx.topic_names, self._head(conn, p), response_ts,
                                     unverified)
            batches = made if made is not None else conn._produced(p, response, response_ts, unverified)
        elif api_key == FETCH_KEY and response is not None and body is not None:
            made = None
            if self.fetched is not None:
                made = self.fetched(body, response, x.ctx.topic_names, self._head(conn, p), response_ts,
                                    unverified)
            fetched = made if made is not None else conn._fetched(p, response, response_ts, unverified)
        return self.exchange_maker.make((
            _get(conn, self.c_conn),
            _get(conn, self.c_client),
            _get(conn, self.c_broker),
            api_key,
            _get(p, self.p_api_name),
            _get(p, self.p_api_version),
            _get(p, self.p_correlation_id),
            _get(p, self.p_client_id),
            body,
            response,
            _get(p, self.p_first_ts),
            _get(p, self.p_last_ts),
            response_ts,
            status,
            unverified,
            error,
            batches,
            fetched,
        ))

    cdef tuple _head(self, conn, p):
        """`Connection._head`."""
        return (
            _get(p, self.p_first_ts),
            _get(conn, self.c_conn),
            _get(conn, self.c_client),
            _get(conn, self.c_broker),
            _get(p, self.p_client_id),
            _get(p, self.p_correlation_id),
            _get(p, self.p_api_version),
        )
