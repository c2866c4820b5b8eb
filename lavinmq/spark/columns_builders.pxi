# Growable buffers, Arrow column builders and the Batch of one record batch (included by _columns.pyx)

# -- growable buffers that pyarrow can take over --------------------------------

cdef class Buf:
    """A growable byte buffer exposing the buffer protocol: pyarrow wraps it
    without copying (pa.py_buffer), so a Buf is not written once handed over."""
    cdef:
        char *data
        Py_ssize_t len
        Py_ssize_t cap
        int exports

    def __dealloc__(self):
        free(self.data)

    cdef int reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap
        cdef char *d
        if self.len + n <= self.cap:
            return 0
        cap = self.cap * 2 if self.cap else 4096
        while cap < self.len + n:
            cap *= 2
        d = <char *>realloc(self.data, cap)
        if d is NULL:
            raise MemoryError()
        self.data = d
        self.cap = cap
        return 0

    cdef inline int put(self, const void *p, Py_ssize_t n) except -1:
        if self.len + n > self.cap:
            self.reserve(n)
        memcpy(self.data + self.len, p, n)
        self.len += n
        return 0

    cdef inline int put_i32(self, int32_t v) except -1:
        return self.put(&v, 4)

    cdef inline int put_i64(self, int64_t v) except -1:
        return self.put(&v, 8)

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.data is NULL:
            self.reserve(1)
        view.buf = self.data
        view.obj = self
        view.len = self.len
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def __len__(self):
        return self.len


cdef class Bits:
    """An Arrow validity bitmap, built one row at a time."""
    cdef:
        Buf buf
        Py_ssize_t n
        Py_ssize_t nulls

    def __cinit__(self):
        self.buf = Buf()

    cdef inline int add(self, bint valid) except -1:
        cdef Py_ssize_t byte = self.n >> 3
        if byte >= self.buf.len:
            self.buf.reserve(1)
            self.buf.data[self.buf.len] = 0
            self.buf.len += 1
        if valid:
            self.buf.data[byte] |= <char>(1 << (self.n & 7))
        else:
            self.nulls += 1
        self.n += 1
        return 0


cdef class VarCol:
    """A string or binary column: int32 offsets, data, validity."""
    cdef:
        Buf offsets
        Buf data
        Bits valid

    def __cinit__(self):
        self.offsets = Buf()
        self.data = Buf()
        self.valid = Bits()
        self.offsets.put_i32(0)

    cdef inline int add(self, const char *p, Py_ssize_t n) except -1:
        self.data.put(p, n)
        if self.data.len > 0x7fffffff:
            raise OverflowError("a batch column over 2 GiB")
        self.offsets.put_i32(<int32_t>self.data.len)
        return self.valid.add(True)

    cdef inline int add_null(self) except -1:
        self.offsets.put_i32(<int32_t>self.data.len)
        return self.valid.add(False)

    cdef inline int close_value(self) except -1:
        # a value whose bytes were put into data piece by piece
        if self.data.len > 0x7fffffff:
            raise OverflowError("a batch column over 2 GiB")
        self.offsets.put_i32(<int32_t>self.data.len)
        return self.valid.add(True)

    def array(self, pa, type_):
        n = self.valid.n
        return pa.Array.from_buffers(type_, n, [pa.py_buffer(self.valid.buf) if self.valid.nulls else None,
                                                pa.py_buffer(self.offsets), pa.py_buffer(self.data)],
                                     null_count=self.valid.nulls)


cdef class IntCol:
    """An int32 or int64 column with validity."""
    cdef:
        Buf values
        Bits valid
        int width

    def __cinit__(self, int width):
        self.values = Buf()
        self.valid = Bits()
        self.width = width

    cdef inline int add(self, int64_t v) except -1:
        if self.width == 8:
            self.values.put_i64(v)
        else:
            self.values.put_i32(<int32_t>v)
        return self.valid.add(True)

    cdef inline int add_null(self) except -1:
        if self.width == 8:
            self.values.put_i64(0)
        else:
            self.values.put_i32(0)
        return self.valid.add(False)

    def array(self, pa, type_):
        return pa.Array.from_buffers(type_, self.valid.n,
                                     [pa.py_buffer(self.valid.buf) if self.valid.nulls else None,
                                      pa.py_buffer(self.values)], null_count=self.valid.nulls)


# property flag bits (flag word bit 15 is content_type)
cdef enum:
    N_STR_PROPS = 9
    # index of each string property among the struct's string children
    S_CONTENT_TYPE = 0
    S_CONTENT_ENCODING = 1
    S_MESSAGE_ID = 2
    S_CORRELATION_ID = 3
    S_TYPE = 4
    S_APP_ID = 5
    S_USER_ID = 6
    S_EXPIRATION = 7
    S_REPLY_TO = 8

# the properties struct's children, in the schema's order (lavinmq.spark.schema)
PROPERTY_FIELDS = ("content_type", "content_encoding", "message_id", "correlation_id", "type", "app_id",
                   "user_id", "priority", "delivery_mode", "expiration", "reply_to")
# which string slot each of those is (-1: the two integers)
cdef int FIELD_SLOT[11]
FIELD_SLOT[:] = [S_CONTENT_TYPE, S_CONTENT_ENCODING, S_MESSAGE_ID, S_CORRELATION_ID, S_TYPE, S_APP_ID,
                 S_USER_ID, -1, -1, S_EXPIRATION, S_REPLY_TO]

cdef enum:
    MAX_DEPTH = 16          # nested tables/arrays rendered as JSON, this deep at most


cdef class Batch:
    """The columns of one Arrow record batch (schema: lavinmq.spark.schema)."""
    cdef:
        public Py_ssize_t rows
        IntCol offset
        IntCol timestamp
        VarCol exchange
        VarCol routing_key
        list str_props     # VarCol per string property, by slot
        IntCol priority
        IntCol delivery_mode
        Buf map_offsets
        Py_ssize_t map_entries
        VarCol keys
        VarCol values
        VarCol body
        Buf scratch

    def __cinit__(self):
        self.offset = IntCol(8)
        self.timestamp = IntCol(8)
        self.exchange = VarCol()
        self.routing_key = VarCol()
        self.str_props = [VarCol() for _ in range(N_STR_PROPS)]
        self.priority = IntCol(4)
        self.delivery_mode = IntCol(4)
        self.map_offsets = Buf()
        self.map_offsets.put_i32(0)
        self.keys = VarCol()
        self.values = VarCol()
        self.body = VarCol()
        self.scratch = Buf()

    @property
    def body_bytes(self):
        return self.body.data.len

    def record_batch(self, schema):
        """-> pyarrow.RecordBatch with exactly the given (Spark's) schema."""
        import pyarrow as pa
        n = self.rows
        props_type = schema.field("properties").type
        children = []
        for i, name in enumerate(PROPERTY_FIELDS):
            t = props_type.field(name).type
            if FIELD_SLOT[i] >= 0:
                children.append((<VarCol>self.str_props[FIELD_SLOT[i]]).array(pa, t))
            elif name == "priority":
                children.append(self.priority.array(pa, t))
            else:
                children.append(self.delivery_mode.array(pa, t))
        headers_type = schema.field("headers").type
        headers = pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(self.map_offsets)]),
            self.keys.array(pa, headers_type.key_type), self.values.array(pa, headers_type.item_type),
            type=headers_type)
        columns = {
            "offset": self.offset.array(pa, schema.field("offset").type),
            "timestamp": self.timestamp.array(pa, schema.field("timestamp").type),
            "exchange": self.exchange.array(pa, schema.field("exchange").type),
            "routing_key": self.routing_key.array(pa, schema.field("routing_key").type),
            "properties": pa.StructArray.from_arrays(children, fields=list(props_type)),
            "headers": headers,
            "body": self.body.array(pa, schema.field("body").type),
        }
        return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)
