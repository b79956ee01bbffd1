# cython: language_level=3
"""Where a class's `__slots__` entry lives in its instances, read from the slot's member descriptor: for
the compiled modules that store into or read slots directly (ksniff.common._slots,
ksniff.capture._fastwalk, ksniff.decode._bodies, ksniff.audit._steps), and those reads and stores."""

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    PyTypeObject PyMemberDescr_Type
    PyTypeObject *Py_TYPE(object)


cdef inline Py_ssize_t slot_offset(type cls, str name) except -1:
    """The offset of the object slot `name` of `cls` itself; TypeError for anything else (a slot of a
    base class, a property, a read-only or non-object member)."""
    cdef PyMemberDef *member
    descriptor = cls.__dict__.get(name)
    if descriptor is None or Py_TYPE(descriptor) is not &PyMemberDescr_Type:
        raise TypeError(f"{cls.__name__}.{name} is not a slot of the class itself")
    member = (<PyMemberDescrObject *> <PyObject *> descriptor).d_member
    if member.type != 16 or member.flags != 0:  # T_OBJECT_EX (structmember.h): a __slots__ entry
        raise TypeError(f"{cls.__name__}.{name} is not a writable object slot")
    return member.offset


cdef inline object slot_get(object obj, Py_ssize_t offset):
    """The object slot at `offset` of `obj` (whose exact class the caller checked): AttributeError when
    it was never set, as the slot's descriptor says."""
    cdef PyObject *v = (<PyObject **> (<char *> <PyObject *> obj + offset))[0]
    if v is NULL:
        raise AttributeError("slot not set")
    return <object> v


cdef inline void slot_put(object obj, Py_ssize_t offset, object value):
    """`value` into the object slot at `offset` of `obj`: the old value let go after the new one is in."""
    cdef PyObject **slot = <PyObject **> (<char *> <PyObject *> obj + offset)
    cdef PyObject *old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject *> value
    Py_XDECREF(old)
