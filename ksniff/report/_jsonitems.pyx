# cython: language_level=3, boundscheck=False, wraparound=False
"""The JSON document's long lists (transactions, partitions, findings), each item on its line, written in
one pass: `joined(values, separator, one_line)` is `separator.join([one_line(v) for v in values])`, text
for text, where `one_line` is the report's encoder (json's C encoder: ASCII only, NaN allowed, keys in
their order, ", " and ": " between items; ksniff.report.formats).

json's encoder encodes every key of every item again and hands each piece to a list it joins; for the
13,200 transactions of 13 keys each of the `txn` benchmark that was 41 ms, most of the document's cost,
itself a tenth of the whole audit. Here an item made of dicts (string keys), lists, tuples, strings,
exact ints and floats, booleans and None is written straight into one buffer, with each key's encoded
text made once. Anything else in an item (another type, a subclass, nesting deeper than MAX_DEPTH) and the
item is given to `one_line` whole instead, so the text is always the encoder's. Built beside the other
compiled modules (setup.py); without it formats.py joins the encoder's texts, the reference
tests/report/test_compiled_json.py holds this one to.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.math cimport isfinite, isnan, llround
from libc.string cimport memcpy

import json

cdef extern from "Python.h":
    bint PyUnicode_CheckExact(object)
    bint PyLong_CheckExact(object)
    bint PyFloat_CheckExact(object)
    bint PyList_CheckExact(object)
    bint PyTuple_CheckExact(object)
    bint PyDict_CheckExact(object)
    bint PyUnicode_IS_ASCII(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    unsigned char *PyUnicode_1BYTE_DATA(object)
    object PyUnicode_New(Py_ssize_t, unsigned int)
    double PyFloat_AS_DOUBLE(object)
    long long PyLong_AsLongLongAndOverflow(object, int *) except? -1
    Py_ssize_t PyList_GET_SIZE(object)
    Py_ssize_t PyTuple_GET_SIZE(object)
    void *PyList_GET_ITEM(object, Py_ssize_t)
    void *PyTuple_GET_ITEM(object, Py_ssize_t)
    int PyDict_Next(object, Py_ssize_t *, void **, void **)
    char *PyOS_double_to_string(double, char, int, int, int *) except NULL
    int Py_DTSF_ADD_DOT_0

cdef enum:
    MAX_DEPTH = 16  # deeper items are the encoder's (json's own limit is the interpreter's recursion)
    MAX_KEYS = 4096  # encoded keys kept per call: the document's own names, not a client's text

# json's escaping of a string that is not plain printable ASCII (the encoder's own function).
_escape = json.encoder.encode_basestring_ascii


cdef struct Buf:
    char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef int _room(Buf *b, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap
    cdef char *p
    if b.n + more <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 65536
    while cap < b.n + more:
        cap *= 2
    p = <char *> PyMem_Realloc(b.p, cap)
    if p == NULL:
        raise MemoryError()
    b.p, b.cap = p, cap
    return 0


cdef inline int _put(Buf *b, const char *s, Py_ssize_t k) except -1:
    _room(b, k)
    memcpy(b.p + b.n, s, k)
    b.n += k
    return 0


cdef inline int _put_str(Buf *b, str s) except -1:
    """`s`, known to be ASCII, as it is."""
    return _put(b, <const char *> PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s))


cdef int _string(Buf *b, str s) except -1:
    cdef Py_ssize_t i, k
    cdef unsigned char *d
    cdef unsigned char c
    if PyUnicode_IS_ASCII(s):
        d = PyUnicode_1BYTE_DATA(s)
        k = PyUnicode_GET_LENGTH(s)
        for i in range(k):
            c = d[i]
            if c < 0x20 or c == 0x22 or c == 0x5C or c == 0x7F:
                break
        else:  # printable ASCII without a quote or a backslash: as it is, between quotes
            _room(b, k + 2)
            b.p[b.n] = 0x22
            memcpy(b.p + b.n + 1, d, k)
            b.p[b.n + k + 1] = 0x22
            b.n += k + 2
            return 0
    return _put_str(b, _escape(s))


cdef inline int _decimal(char *digits, int at, unsigned long long u, bint negative):
    """Writes `u` in decimal (with a '-' before it when `negative`) to end just before digits[at];
    returns where the text starts."""
    while True:
        at -= 1
        digits[at] = <char> (48 + u % 10)
        u //= 10
        if u == 0:
            break
    if negative:
        at -= 1
        digits[at] = 45  # '-'
    return at


cdef int _integer(Buf *b, object v) except -1:
    cdef int overflow = 0
    cdef long long x = PyLong_AsLongLongAndOverflow(v, &overflow)
    cdef unsigned long long u
    cdef char digits[24]
    cdef int at
    if overflow:
        return _put_str(b, str(v))
    u = <unsigned long long> (-(x + 1)) + 1 if x < 0 else <unsigned long long> x
    at = _decimal(digits, 24, u, x < 0)
    return _put(b, digits + at, 24 - at)


# A capture's times and durations are microseconds: a double whose shortest text (float.__repr__) has at
# most six decimals is written from the integer of its microseconds, without the shortest-digits search
# (Python's dtoa: 3% of the `txn` benchmark's instructions). Below MICROS_BELOW the spacing of doubles is
# under a microsecond, so at most one number of six decimals rounds to `d`: when n / 1e6 (IEEE division,
# rounded correctly, as reading the text back is) gives `d` back, the text of n / 10**6, its trailing
# zeros dropped, is the shortest that does, the one repr gives. From 1e-4 up repr writes no exponent.
cdef double MICROS_FROM = 1e-4
cdef double MICROS_BELOW = 8589934592.0  # 2**33: the spacing of doubles there is 2**-20, under 1e-6


cdef int _micros(Buf *b, double d) except -1:
    """Writes repr(d) and returns 1 when it has at most six decimals and no exponent; else 0 (nothing
    written)."""
    cdef double a = -d if d < 0 else d
    cdef long long n, frac
    cdef char digits[32]
    cdef int at = 32, k
    if not (MICROS_FROM <= a < MICROS_BELOW):
        return 0
    n = llround(a * 1e6)
    if <double> n / 1e6 != a:
        return 0
    frac = n % 1000000
    k = 6
    while k > 1 and frac % 10 == 0:  # trailing zeros dropped, one digit kept ("5.0")
        frac //= 10
        k -= 1
    while k:
        at -= 1
        digits[at] = <char> (48 + frac % 10)
        frac //= 10
        k -= 1
    at -= 1
    digits[at] = 46  # '.'
    at = _decimal(digits, at, <unsigned long long> (n // 1000000), d < 0)
    _put(b, digits + at, 32 - at)
    return 1


cdef int _number(Buf *b, double d) except -1:
    cdef char *text
    cdef Py_ssize_t k = 0
    if not isfinite(d):  # allow_nan: as json writes them
        if isnan(d):
            return _put(b, "NaN", 3)
        return _put(b, "Infinity", 8) if d > 0 else _put(b, "-Infinity", 9)
    if _micros(b, d):
        return 0
    text = PyOS_double_to_string(d, 114, 0, Py_DTSF_ADD_DOT_0, NULL)  # 'r': float.__repr__'s text
    try:
        while text[k]:
            k += 1
        _put(b, text, k)
    finally:
        PyMem_Free(text)
    return 0


cdef int _value(Buf *b, object v, dict keys, int depth) except -1:
    """Writes `v`; 0 when it (or something in it) is not one of the types written here (the caller then
    gives the whole item to the encoder), else 1."""
    cdef Py_ssize_t i, n, pos = 0
    cdef void *k
    cdef void *item
    if v is None:
        _put(b, "null", 4)
    elif v is True:
        _put(b, "true", 4)
    elif v is False:
        _put(b, "false", 5)
    elif PyUnicode_CheckExact(v):
        _string(b, <str> v)
    elif PyLong_CheckExact(v):
        _integer(b, v)
    elif PyFloat_CheckExact(v):
        _number(b, PyFloat_AS_DOUBLE(v))
    elif depth >= MAX_DEPTH:
        return 0
    elif PyDict_CheckExact(v):
        _put(b, "{", 1)
        first = True
        while PyDict_Next(v, &pos, &k, &item):
            key = <object> k
            if not PyUnicode_CheckExact(key):
                return 0
            text = keys.get(key)
            if text is None:
                text = _escape(key) + ": "
                if len(keys) < MAX_KEYS:
                    keys[key] = text
            if not first:
                _put(b, ", ", 2)
            first = False
            _put_str(b, <str> text)
            if not _value(b, <object> item, keys, depth + 1):
                return 0
        _put(b, "}", 1)
    elif PyList_CheckExact(v) or PyTuple_CheckExact(v):
        listed = PyList_CheckExact(v)
        n = PyList_GET_SIZE(v) if listed else PyTuple_GET_SIZE(v)
        _put(b, "[", 1)
        for i in range(n):
            if i:
                _put(b, ", ", 2)
            item = PyList_GET_ITEM(v, i) if listed else PyTuple_GET_ITEM(v, i)
            if not _value(b, <object> item, keys, depth + 1):
                return 0
        _put(b, "]", 1)
    else:
        return 0
    return 1


def joined(list values, str separator, one_line):
    """`separator.join([one_line(v) for v in values])` (the module's docstring)."""
    cdef Buf b
    cdef Py_ssize_t i, start
    cdef dict keys = {}
    if not PyUnicode_IS_ASCII(separator):
        return separator.join([one_line(v) for v in values])
    b.p, b.n, b.cap = NULL, 0, 0
    try:
        for i in range(len(values)):
            if i:
                _put_str(&b, separator)
            start = b.n
            if not _value(&b, values[i], keys, 0):
                b.n = start  # what was written of it goes: the encoder writes it whole
                text = one_line(values[i])
                if not PyUnicode_IS_ASCII(text):  # not the report's encoder: its text as it gives it
                    return separator.join([one_line(v) for v in values])
                _put_str(&b, text)
        out = PyUnicode_New(b.n, 127)
        if b.n:
            memcpy(PyUnicode_1BYTE_DATA(out), b.p, b.n)
        return out
    finally:
        PyMem_Free(b.p)
