# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled store of the `fast_init` classes' `__init__` (ksniff.common.codegen): every field's
value put straight into its slot, in one call.

The Python `__init__` that `fast_init` writes stores each field through its slot's descriptor
(`descriptor.__set__(self, value)`), a call per field: about a microsecond for the twenty fields of an
Exchange or a record batch header, made tens of thousands of times per capture of small transactions.
With this module the generated `__init__` keeps its signature, defaults and default factories (Python
still binds the arguments) and hands the values to `fill`, which writes them at the offsets the slots'
descriptors name. The descriptor path stays the reference (`KSNIFF_PURE_PYTHON=1`, or no compiler), held
to the same objects by tests/common/test_compiled_init.py.
"""

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF


from ksniff.common._slotdesc cimport slot_offset


cdef extern from "Python.h":
    Py_ssize_t PyTuple_GET_SIZE(object)
    PyObject *PyTuple_GET_ITEM(object, Py_ssize_t)
    int PyObject_TypeCheck(object, PyTypeObject *)


cdef enum:
    MAX_FIELDS = 64


cdef class Layout:
    """Where the fields of one class live in its instances (the offsets of its slots, in field order)."""

    cdef Py_ssize_t n
    cdef Py_ssize_t offsets[MAX_FIELDS]
    cdef PyTypeObject *cls
    cdef object keep  # holds the class alive as long as its layout

    def __init__(self, type cls, tuple names):
        """Refuses (TypeError) a field that is not a writable object slot of `cls` itself."""
        if len(names) > MAX_FIELDS:
            raise TypeError(f"{cls.__name__}: more than {MAX_FIELDS} fields")
        for i, name in enumerate(names):
            self.offsets[i] = slot_offset(cls, name)
        self.n = len(names)
        self.cls = <PyTypeObject *> cls
        self.keep = cls


def fill(self, Layout layout, *values):
    """Stores `values` (one per field, in order) into the slots of `self`, an instance of the layout's
    class; whatever a slot held before is released."""
    cdef Py_ssize_t i
    cdef PyObject **slot
    cdef PyObject *old
    cdef PyObject *value
    cdef char *address
    if not PyObject_TypeCheck(self, layout.cls):
        raise TypeError(f"fill: {type(self).__name__} is not a {(<object> layout.cls).__name__}")
    if PyTuple_GET_SIZE(values) != layout.n:
        raise TypeError(f"fill: {len(values)} values for {layout.n} fields")
    address = <char *> <PyObject *> self
    for i in range(layout.n):
        value = PyTuple_GET_ITEM(values, i)
        slot = <PyObject **> (address + layout.offsets[i])
        Py_INCREF(<object> value)
        old = slot[0]
        slot[0] = value
        Py_XDECREF(old)
