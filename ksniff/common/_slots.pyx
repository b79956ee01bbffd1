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

The module also holds the table through which the compiled fold reads and writes its classes' slots by
name (`fast_attributes`, below), held to the type's own lookup by tests/common/test_fast_attributes.py.
"""

import sys

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


# -- reads and writes of slots by name, from compiled code ----------------------------------------------
# Code compiled by Cython from plain Python (the audit's fold: setup.py's COMPILED_SOURCES) reads an
# attribute through the type's generic lookup: the method cache, the member descriptor, its getter, about
# 130 instructions for one slot, where the interpreter's own specialised LOAD_ATTR_SLOT takes about ten.
# Those reads were 39% of the fold's instructions over many small transactions. `fast_attributes` gives a
# class a `tp_getattro` (and, when the class has no `__setattr__` of its own, a `tp_setattro`) that looks
# up (class, name) in a table of slot offsets first, about 30 instructions, and otherwise takes the
# generic path. The table is trusted only while the class is the one it was entered for: its version tag
# (which any change to the class or its bases resets) is the one seen when the entry was made or last
# checked against the class's own lookup, and names are compared as the interned strings the class's
# slots and the compiled code both use (any other string takes the generic path).

cdef extern from *:
    """
    #include <stdint.h>
    #include "structmember.h"

    typedef struct {
        PyTypeObject *tp;
        PyObject *name;       /* interned */
        Py_ssize_t offset;
        unsigned int version; /* the class's version tag when last checked */
        int writable;
    } ks_slot;
    #define KS_SLOTS 2048     /* open addressing, at most half full: the fold has ~30 classes */
    static ks_slot ks_slots[KS_SLOTS];
    static Py_ssize_t ks_used = 0;

    static inline size_t ks_hash(PyTypeObject *tp, PyObject *name) {
        uintptr_t a = (uintptr_t)tp >> 4, b = (uintptr_t)name >> 4;
        return (size_t)((a * 0x9E3779B1u) ^ (b * 0x85EBCA77u)) & (KS_SLOTS - 1);
    }

    /* The entry of an object slot, from the class's own lookup: the slot's member descriptor must still
       be what `name` finds on the class, at the same offset. */
    static ks_slot *ks_recheck(ks_slot *e) {
        PyObject *found = _PyType_Lookup(e->tp, e->name);  /* gives the class a version tag again */
        PyMemberDef *m;
        if (found == NULL || Py_TYPE(found) != &PyMemberDescr_Type)
            return NULL;
        m = ((PyMemberDescrObject *)found)->d_member;
        if (m->type != T_OBJECT_EX || m->offset != e->offset
                || !(e->tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
            return NULL;
        e->version = e->tp->tp_version_tag;
        return e;
    }

    static inline ks_slot *ks_find(PyTypeObject *tp, PyObject *name) {
        size_t h = ks_hash(tp, name);
        for (;;) {
            ks_slot *e = &ks_slots[h];
            if (e->tp == tp && e->name == name) {
                if ((tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == e->version)
                    return e;
                return ks_recheck(e);  /* the class changed: e.g. its __init__ put in place on first use */
            }
            if (e->tp == NULL)
                return NULL;
            h = (h + 1) & (KS_SLOTS - 1);
        }
    }

    static PyObject *ks_getattro(PyObject *obj, PyObject *name) {
        ks_slot *e = ks_find(Py_TYPE(obj), name);
        if (e != NULL) {
            PyObject *v = *(PyObject **)((char *)obj + e->offset);
            if (v != NULL) {
                Py_INCREF(v);
                return v;
            }
        }
        return PyObject_GenericGetAttr(obj, name);  /* an empty slot raises its AttributeError there */
    }

    static int ks_setattro(PyObject *obj, PyObject *name, PyObject *value) {
        if (value != NULL) {  /* a delete goes the generic way */
            ks_slot *e = ks_find(Py_TYPE(obj), name);
            if (e != NULL && e->writable) {
                PyObject **slot = (PyObject **)((char *)obj + e->offset);
                PyObject *old = *slot;
                Py_INCREF(value);
                *slot = value;
                Py_XDECREF(old);
                return 0;
            }
        }
        return PyObject_GenericSetAttr(obj, name, value);
    }

    /* Enters every (class, name) of `names` (a list of (name, offset, writable)); 0 when the table has no
       room for them all (then none is entered). */
    static int ks_enter(PyTypeObject *tp, PyObject *names) {
        Py_ssize_t i, n = PyList_GET_SIZE(names);
        if (ks_used + n > KS_SLOTS / 2)
            return 0;
        for (i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(names, i);
            PyObject *name = PyTuple_GET_ITEM(item, 0);
            size_t h = ks_hash(tp, name);
            while (ks_slots[h].tp != NULL && !(ks_slots[h].tp == tp && ks_slots[h].name == name))
                h = (h + 1) & (KS_SLOTS - 1);
            if (ks_slots[h].tp == NULL)
                ks_used++;
            ks_slots[h].tp = tp;
            ks_slots[h].name = name;
            ks_slots[h].offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1));
            ks_slots[h].writable = PyObject_IsTrue(PyTuple_GET_ITEM(item, 2));
            ks_slots[h].version = tp->tp_version_tag;
        }
        return 1;
    }

    static int ks_generic(PyTypeObject *tp, int writes) {
        return writes ? tp->tp_setattro == PyObject_GenericSetAttr : tp->tp_getattro == PyObject_GenericGetAttr;
    }

    static void ks_install(PyTypeObject *tp, int writes) {
        tp->tp_getattro = ks_getattro;
        if (writes)
            tp->tp_setattro = ks_setattro;
    }

    static int ks_installed(PyTypeObject *tp) { return tp->tp_getattro == ks_getattro; }

    static int ks_slot_of(PyTypeObject *tp, PyObject *name, Py_ssize_t *offset, int *writable) {
        PyObject *found = _PyType_Lookup(tp, name);
        PyMemberDef *m;
        if (found == NULL || Py_TYPE(found) != &PyMemberDescr_Type)
            return 0;
        m = ((PyMemberDescrObject *)found)->d_member;
        if (m->type != T_OBJECT_EX)
            return 0;
        *offset = m->offset;
        *writable = !(m->flags & READONLY);
        return 1;
    }

    static int ks_version_valid(PyTypeObject *tp) { return (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) != 0; }
    """
    int ks_enter(PyTypeObject *tp, list names)
    int ks_generic(PyTypeObject *tp, int writes)
    void ks_install(PyTypeObject *tp, int writes)
    int ks_installed(PyTypeObject *tp)
    int ks_slot_of(PyTypeObject *tp, object name, Py_ssize_t *offset, int *writable)
    int ks_version_valid(PyTypeObject *tp)


# The classes entered, with their entries' names: the table holds their pointers, not references.
_entered = []


def fast_attributes(type cls):
    """Puts `cls`'s object slots (its own and its bases') in the table, and its instances' attribute
    reads (and writes, when the class has no `__setattr__` of its own) through it: the same values and
    errors as the generic lookup (the module's comment above). Returns whether it did: not for a class
    with its own `__getattribute__` or `__getattr__`, without slots, or when the table is full."""
    cdef PyTypeObject *tp = <PyTypeObject *> cls
    cdef Py_ssize_t offset
    cdef int writable
    if ks_installed(tp):
        return True
    if not ks_generic(tp, 0):
        return False
    writes = bool(ks_generic(tp, 1))
    entries = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            name = sys.intern(name)
            if ks_slot_of(tp, name, &offset, &writable):
                entries.append((name, offset, writes and writable))
    if not entries or not ks_version_valid(tp) or not ks_enter(tp, entries):
        return False
    _entered.append((cls, entries))
    ks_install(tp, writes)
    return True
