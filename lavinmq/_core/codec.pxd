# AMQP value codec: field tables, method arguments (from the generated spec
# tables) and basic properties, including the conversion between the wire's
# big-endian property list and LavinMQ's little-endian on-disk form.
from lavinmq._core.buffer cimport WriteBuffer, Reader

cdef enum:
    MAX_TABLE_DEPTH = 32

cdef object decode_table(Reader *r, int depth)
cdef object decode_field_value(Reader *r, int depth)
cdef int encode_table(WriteBuffer wb, object table) except -1
cdef int encode_field_value(WriteBuffer wb, object value) except -1
cdef tuple decode_method_args(int class_id, int method_id, const char *p, Py_ssize_t n)
cdef int encode_method_args(WriteBuffer wb, int class_id, int method_id, tuple args) except -1

# Walk a property list (flags + fields). src_le: the source is in disk
# (little-endian) form. With dst != NULL the fields are written there in the
# other byte order. Returns the length of the property list.
cdef Py_ssize_t props_convert(const char *src, Py_ssize_t avail, char *dst, bint src_le) except -1
