# Dead-lettering in place: the record of a message that leaves a queue
# (rejected, expired, maxlen, delivery_limit) rewritten into a new record for
# the dead-letter exchange, with the x-death header as RabbitMQ 3.10 writes
# it, built straight from the bytes: no Python object per message.
from lavinmq._core.buffer cimport WriteBuffer

cdef enum:
    DL_REJECTED = 0
    DL_EXPIRED = 1
    DL_MAXLEN = 2
    DL_DELIVERY_LIMIT = 3

cdef Py_ssize_t build_dead_letter(WriteBuffer out, const char *rec, int reason, bytes queue,
                                  bytes dlx, bytes dlrk, unsigned long long now_ms) except -1

# Would publishing the dead-lettered record `rec` to `queue` close a cycle
# with no rejection in it? (RabbitMQ drops those.)
cdef bint is_cycle(const char *rec, bytes queue) except -1


# A copy of rec whose headers carry key = value (a long), replacing any
# header of that name: x-delivery-count on redeliveries.
cdef Py_ssize_t build_with_int_header(WriteBuffer out, const char *rec, const char *key, Py_ssize_t klen,
                                      long long value) except -1

# Does a table body parse to its end? (A message's headers were not checked
# when it was published.)
cdef bint table_ok(const char *body, Py_ssize_t blen) noexcept

# The value of header `key` in rec (type byte first): 1 found, 0 not.
cdef int find_header(const char *rec, const char *key, Py_ssize_t klen, const char **val,
                     Py_ssize_t *vlen) except -1
