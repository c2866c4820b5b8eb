# cython: language_level=3
"""Debug counters. `count_allocations()` wraps CPython's object allocator
(PYMEM_DOMAIN_OBJ) with one that counts calls and delegates to the original,
the way tracemalloc hooks it, so a test can check that the message path
creates no Python object per message."""

cdef extern from "Python.h":
    ctypedef struct PyMemAllocatorEx:
        void *ctx
        void *(*malloc)(void *ctx, size_t size) noexcept nogil
        void *(*calloc)(void *ctx, size_t nelem, size_t elsize) noexcept nogil
        void *(*realloc)(void *ctx, void *ptr, size_t new_size) noexcept nogil
        void (*free)(void *ctx, void *ptr) noexcept nogil
    ctypedef enum PyMemAllocatorDomain:
        PYMEM_DOMAIN_OBJ
    void PyMem_GetAllocator(PyMemAllocatorDomain domain, PyMemAllocatorEx *allocator)
    void PyMem_SetAllocator(PyMemAllocatorDomain domain, PyMemAllocatorEx *allocator)

cdef PyMemAllocatorEx _orig
cdef bint _installed = False
cdef unsigned long long _count = 0


cdef void *_malloc(void *ctx, size_t size) noexcept nogil:
    global _count
    _count += 1
    return _orig.malloc(_orig.ctx, size)


cdef void *_calloc(void *ctx, size_t nelem, size_t elsize) noexcept nogil:
    global _count
    _count += 1
    return _orig.calloc(_orig.ctx, nelem, elsize)


cdef void *_realloc(void *ctx, void *ptr, size_t new_size) noexcept nogil:
    global _count
    if ptr == NULL:
        _count += 1
    return _orig.realloc(_orig.ctx, ptr, new_size)


cdef void _free(void *ctx, void *ptr) noexcept nogil:
    _orig.free(_orig.ctx, ptr)


def count_allocations():
    """Start counting object allocations (idempotent)."""
    global _installed
    cdef PyMemAllocatorEx hook
    if _installed:
        return
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &_orig)
    hook.ctx = NULL
    hook.malloc = _malloc
    hook.calloc = _calloc
    hook.realloc = _realloc
    hook.free = _free
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &hook)
    _installed = True


def allocations():
    """Object allocations since count_allocations()."""
    return _count


# The regression gate (benchmarks/gate.py) counts instructions under
# callgrind with collection toggled on and off by this one C function and a
# profile dump after each call: what it counts is exactly fn(n), with no
# interpreter start-up, imports or set-up. noinline keeps the symbol that
# callgrind's --toggle-collect matches.
cdef extern from *:
    """
    static __attribute__((noinline)) PyObject *
    lavinmq_gate_measured(PyObject *fn, PyObject *arg)
    {
        return PyObject_CallOneArg(fn, arg);
    }
    """
    object lavinmq_gate_measured(object fn, object arg)


def gate_measured(fn, n):
    """fn(n), counted by callgrind when the gate runs it (see above)."""
    return lavinmq_gate_measured(fn, n)
