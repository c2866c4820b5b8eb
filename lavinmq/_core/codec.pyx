# cython: language_level=3
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from lavinmq._core.buffer cimport (
    WriteBuffer, Reader, reader_need, read_u8, read_u16, read_u32, read_u64,
    read_shortstr, read_longstr, be16, be32, be64, le16, le32, le64,
    put_be16, put_be32, put_be64, put_le16, put_le32, put_le64,
)

import datetime
import decimal

from lavinmq import spec
from lavinmq.errors import SyntaxError_, NotImplemented_, FrameError


class Timestamp(int):
    """A field table timestamp ('T', seconds since 1970): an int that
    remembers its type, so that it is encoded back as 'T' and so that a
    stream consumer's x-stream-offset can tell a point in time from an
    offset."""
    __slots__ = ()

    def __repr__(self):
        return f"Timestamp({int(self)})"


class Long(int):
    """An int written as 'l' (64-bit) however small: RabbitMQ's 'long',
    which some arguments must be (x-federation-upstream's x-max-hops)."""
    __slots__ = ()

# argument type codes, resolved once from the generated spec tables
cdef enum ArgType:
    A_OCTET = 1
    A_SHORT
    A_LONG
    A_LONGLONG
    A_SHORTSTR
    A_LONGSTR
    A_BIT
    A_TABLE
    A_TIMESTAMP

_TYPE_CODES = {
    "octet": A_OCTET, "short": A_SHORT, "long": A_LONG, "longlong": A_LONGLONG,
    "shortstr": A_SHORTSTR, "longstr": A_LONGSTR, "bit": A_BIT, "table": A_TABLE,
    "timestamp": A_TIMESTAMP,
}
cdef dict METHOD_ARG_TYPES = {
    key: tuple(_TYPE_CODES[t] for _, t in args) for key, (_, args, _) in spec.METHODS.items()
}

# Property types, in flag order: 1 shortstr, 2 table, 3 octet, 4 timestamp
cdef int PROP_TYPES[14]
for _i, (_n, _t) in enumerate(spec.BASIC_PROPERTIES):
    PROP_TYPES[_i] = {"shortstr": 1, "table": 2, "octet": 3, "timestamp": 4}[_t]
PROPERTY_NAMES = tuple(n.replace("-", "_") for n, _ in spec.BASIC_PROPERTIES)


cdef inline str decode_str(const char *p, Py_ssize_t n):
    # surrogateescape: a name that is not UTF-8 still round-trips byte for byte
    return p[:n].decode("utf-8", "surrogateescape")


cdef object decode_field_value(Reader *r, int depth):
    cdef uint8_t t = read_u8(r)
    cdef Py_ssize_t n
    cdef const char *s
    cdef uint32_t u32
    cdef uint64_t u64
    cdef float f32
    cdef double f64
    cdef uint8_t scale
    cdef list items
    cdef Reader sub
    if t == b"t":
        return read_u8(r) != 0
    elif t == b"b":
        return <int8_t>read_u8(r)
    elif t == b"B":
        return read_u8(r)
    elif t == b"s":
        return <int16_t>read_u16(r)
    elif t == b"u":
        return read_u16(r)
    elif t == b"I":
        return <int32_t>read_u32(r)
    elif t == b"i":
        return read_u32(r)
    elif t == b"l":
        return <int64_t>read_u64(r)
    elif t == b"L":
        return read_u64(r)
    elif t == b"f":
        u32 = read_u32(r)
        memcpy(&f32, &u32, 4)
        return f32
    elif t == b"d":
        u64 = read_u64(r)
        memcpy(&f64, &u64, 8)
        return f64
    elif t == b"D":
        scale = read_u8(r)
        u32 = read_u32(r)
        return decimal.Decimal(<int32_t>u32).scaleb(-scale)
    elif t == b"S":
        s = read_longstr(r, &n)
        try:
            return s[:n].decode("utf-8")
        except UnicodeDecodeError:
            return s[:n]
    elif t == b"x":
        s = read_longstr(r, &n)
        return PyBytes_FromStringAndSize(s, n)
    elif t == b"T":
        return Timestamp(read_u64(r))
    elif t == b"V":
        return None
    elif t == b"F":
        return decode_table(r, depth + 1)
    elif t == b"A":
        if depth >= MAX_TABLE_DEPTH:
            raise FrameError("field table nested too deep")
        s = read_longstr(r, &n)
        sub.p = s
        sub.len = n
        sub.pos = 0
        items = []
        while sub.pos < sub.len:
            items.append(decode_field_value(&sub, depth + 1))
        return items
    raise FrameError(f"unknown field type {chr(t)!r}")


cdef object decode_table(Reader *r, int depth):
    cdef Py_ssize_t n, kn
    cdef const char *s
    cdef const char *k
    cdef Reader sub
    cdef dict out = {}
    if depth >= MAX_TABLE_DEPTH:
        raise FrameError("field table nested too deep")
    s = read_longstr(r, &n)
    sub.p = s
    sub.len = n
    sub.pos = 0
    while sub.pos < sub.len:
        k = read_shortstr(&sub, &kn)
        key = decode_str(k, kn)
        out[key] = decode_field_value(&sub, depth)
    return out


cdef int encode_field_value(WriteBuffer wb, object v) except -1:
    cdef Py_ssize_t start
    cdef double d
    cdef uint64_t u64
    if v is None:
        wb.write_u8(b"V")
    elif v is True or v is False:
        wb.write_u8(b"t")
        wb.write_u8(1 if v else 0)
    elif isinstance(v, Timestamp):
        wb.write_u8(b"T")
        wb.write_u64(<uint64_t>v)
    elif isinstance(v, Long):
        wb.write_u8(b"l")
        wb.write_u64(<uint64_t><int64_t>v)
    elif isinstance(v, int):
        if -2147483648 <= v <= 2147483647:
            wb.write_u8(b"I")
            wb.write_u32(<uint32_t><int32_t>v)
        elif -9223372036854775808 <= v <= 9223372036854775807:
            wb.write_u8(b"l")
            wb.write_u64(<uint64_t><int64_t>v)
        else:
            raise ValueError(f"integer {v} does not fit a field table")
    elif isinstance(v, float):
        wb.write_u8(b"d")
        d = v
        memcpy(&u64, &d, 8)
        wb.write_u64(u64)
    elif isinstance(v, str):
        wb.write_u8(b"S")
        wb.write_longstr_obj(v)
    elif isinstance(v, (bytes, bytearray, memoryview)):
        wb.write_u8(b"x")
        wb.write_longstr_obj(bytes(v))
    elif isinstance(v, dict):
        wb.write_u8(b"F")
        encode_table(wb, v)
    elif isinstance(v, (list, tuple)):
        wb.write_u8(b"A")
        start = wb.len
        wb.write_u32(0)
        for item in v:
            encode_field_value(wb, item)
        put_be32(wb.buf + start, <uint32_t>(wb.len - start - 4))
    elif isinstance(v, datetime.datetime):
        wb.write_u8(b"T")
        wb.write_u64(<uint64_t>int(v.timestamp()))
    elif isinstance(v, decimal.Decimal):
        sign, digits, exp = v.as_tuple()
        wb.write_u8(b"D")
        wb.write_u8(<uint8_t>max(0, -exp))
        wb.write_u32(<uint32_t><int32_t>int(v.scaleb(max(0, -exp))))
    else:
        raise ValueError(f"cannot encode {type(v).__name__} in a field table")
    return 0


cdef int encode_table(WriteBuffer wb, object table) except -1:
    cdef Py_ssize_t start = wb.len
    wb.write_u32(0)
    if table:
        for k, v in table.items():
            wb.write_shortstr_obj(k)
            encode_field_value(wb, v)
    put_be32(wb.buf + start, <uint32_t>(wb.len - start - 4))
    return 0


cdef tuple decode_method_args(int class_id, int method_id, const char *p, Py_ssize_t n):
    cdef tuple types = METHOD_ARG_TYPES.get((class_id, method_id))
    cdef Reader r
    cdef Py_ssize_t sl
    cdef const char *s
    cdef int bitpos = 8
    cdef uint8_t bits = 0
    cdef int t
    if types is None:
        raise NotImplemented_(f"unknown method {class_id}/{method_id}", class_id, method_id)
    r.p = p
    r.len = n
    r.pos = 0
    out = []
    for t in types:
        if t != A_BIT:
            bitpos = 8
        if t == A_OCTET:
            out.append(read_u8(&r))
        elif t == A_SHORT:
            out.append(read_u16(&r))
        elif t == A_LONG:
            out.append(read_u32(&r))
        elif t == A_LONGLONG or t == A_TIMESTAMP:
            out.append(read_u64(&r))
        elif t == A_SHORTSTR:
            s = read_shortstr(&r, &sl)
            out.append(decode_str(s, sl))
        elif t == A_LONGSTR:
            s = read_longstr(&r, &sl)
            out.append(PyBytes_FromStringAndSize(s, sl))
        elif t == A_TABLE:
            out.append(decode_table(&r, 0))
        elif t == A_BIT:
            if bitpos == 8:
                bits = read_u8(&r)
                bitpos = 0
            out.append((bits >> bitpos) & 1 == 1)
            bitpos += 1
    return tuple(out)


cdef int encode_method_args(WriteBuffer wb, int class_id, int method_id, tuple args) except -1:
    cdef tuple types = METHOD_ARG_TYPES[(class_id, method_id)]
    cdef int t, i = 0
    cdef int bitpos = 8
    cdef Py_ssize_t bitbyte = 0
    if len(args) != len(types):
        raise ValueError(f"method {class_id}/{method_id} takes {len(types)} arguments")
    for t in types:
        v = args[i]
        i += 1
        if t != A_BIT:
            bitpos = 8
        if t == A_OCTET:
            wb.write_u8(v)
        elif t == A_SHORT:
            wb.write_u16(v)
        elif t == A_LONG:
            wb.write_u32(v)
        elif t == A_LONGLONG or t == A_TIMESTAMP:
            wb.write_u64(v)
        elif t == A_SHORTSTR:
            if isinstance(v, str):
                v = (<str>v).encode("utf-8", "surrogateescape")
            wb.write_shortstr_obj(v)
        elif t == A_LONGSTR:
            wb.write_longstr_obj(v)
        elif t == A_TABLE:
            encode_table(wb, v)
        elif t == A_BIT:
            if bitpos == 8:
                bitbyte = wb.len
                wb.write_u8(0)
                bitpos = 0
            if v:
                wb.buf[bitbyte] = <char>(<uint8_t>wb.buf[bitbyte] | (1 << bitpos))
            bitpos += 1
    return 0


cdef extern from *:
    int __builtin_clz(unsigned int x) nogil


cdef Py_ssize_t props_convert(const char *src, Py_ssize_t avail, char *dst, bint src_le) except -1:
    cdef Py_ssize_t pos = 2
    cdef uint16_t flags
    cdef unsigned int rest
    cdef uint32_t n32
    cdef uint64_t v64
    cdef int i, t
    cdef Py_ssize_t n
    if avail < 2:
        raise SyntaxError_("truncated content header")
    flags = le16(src) if src_le else be16(src)
    if flags & 0x0003:
        # bit 0 would chain a second flag word, bit 1 has no property:
        # neither exists in 0-9-1 basic, so the header is malformed.
        raise SyntaxError_("invalid property flags")
    if dst is not NULL:
        if src_le:
            put_be16(dst, flags)
        else:
            put_le16(dst, flags)
    rest = flags & 0xFFFC
    while rest:
        # only the properties present: most messages carry one or two of 14
        i = __builtin_clz(rest) - 16        # 0 for bit 15 (content_type), ...
        rest &= ~(1 << (15 - i))
        t = PROP_TYPES[i]
        if t == 1:  # shortstr
            if pos + 1 > avail:
                raise SyntaxError_("truncated content header")
            n = 1 + <uint8_t>src[pos]
        elif t == 3:  # octet
            n = 1
        elif t == 4:  # timestamp
            if pos + 8 > avail:
                raise SyntaxError_("truncated content header")
            if dst is not NULL:
                v64 = le64(src + pos) if src_le else be64(src + pos)
                if src_le:
                    put_be64(dst + pos, v64)
                else:
                    put_le64(dst + pos, v64)
            pos += 8
            continue
        else:  # table: u32 length in the source's order, body kept as sent
            if pos + 4 > avail:
                raise SyntaxError_("truncated content header")
            n32 = le32(src + pos) if src_le else be32(src + pos)
            if pos + 4 + <Py_ssize_t>n32 > avail:
                raise SyntaxError_("truncated content header")
            if dst is not NULL:
                if src_le:
                    put_be32(dst + pos, n32)
                else:
                    put_le32(dst + pos, n32)
                memcpy(dst + pos + 4, src + pos + 4, n32)
            pos += 4 + n32
            continue
        if pos + n > avail:
            raise SyntaxError_("truncated content header")
        if dst is not NULL:
            memcpy(dst + pos, src + pos, n)
        pos += n
    return pos


# -- Python-facing API (control plane, tests) ----------------------------------

def decode_table_bytes(bytes data):
    """Decode a length-prefixed field table."""
    cdef Reader r
    r.p = data
    r.len = len(data)
    r.pos = 0
    return decode_table(&r, 0)


def encode_table_bytes(table):
    cdef WriteBuffer wb = WriteBuffer()
    encode_table(wb, table)
    return wb.getvalue()


def decode_method(int class_id, int method_id, bytes payload):
    return decode_method_args(class_id, method_id, payload, len(payload))


def encode_method_frame(int channel, int class_id, int method_id, tuple args):
    cdef WriteBuffer wb = WriteBuffer()
    wb.start_method(channel, class_id, method_id)
    encode_method_args(wb, class_id, method_id, args)
    wb.end_frame()
    return wb.getvalue()


def decode_properties(bytes data, bint little_endian=False):
    """Property list (flags + fields) -> dict of the present properties."""
    cdef Reader r
    cdef const char *p = data
    cdef uint16_t flags
    cdef Py_ssize_t sl
    cdef const char *s
    cdef bytes wire
    if little_endian:
        wire = PyBytes_FromStringAndSize(NULL, len(data))
        props_convert(p, len(data), <char *><const char *>wire, True)
        p = wire
    r.p = p
    r.len = len(data)
    r.pos = 0
    flags = read_u16(&r)
    out = {}
    rest = flags & 0xFFFC
    while rest:
        # only the properties present: most messages carry one or two of 14
        i = __builtin_clz(rest) - 16        # 0 for bit 15 (content_type), ...
        rest &= ~(1 << (15 - i))
        t = PROP_TYPES[i]
        name = PROPERTY_NAMES[i]
        if t == 1:
            s = read_shortstr(&r, &sl)
            out[name] = decode_str(s, sl)
        elif t == 2:
            out[name] = decode_table(&r, 0)
        elif t == 3:
            out[name] = read_u8(&r)
        else:
            out[name] = read_u64(&r)
    return out


def encode_properties(dict props, bint little_endian=False):
    """dict of properties -> property list (flags + fields), wire order."""
    cdef WriteBuffer wb = WriteBuffer()
    cdef uint16_t flags = 0
    cdef bytes out
    wb.write_u16(0)
    for i in range(14):
        name = PROPERTY_NAMES[i]
        v = props.get(name)
        if v is None:
            continue
        flags |= 1 << (15 - i)
        t = PROP_TYPES[i]
        if t == 1:
            wb.write_shortstr_obj(v)
        elif t == 2:
            encode_table(wb, v)
        elif t == 3:
            wb.write_u8(v)
        else:
            wb.write_u64(int(v.timestamp()) if isinstance(v, datetime.datetime) else v)
    put_be16(wb.buf, flags)
    out = wb.getvalue()
    if little_endian:
        le = PyBytes_FromStringAndSize(NULL, len(out))
        props_convert(out, len(out), <char *><const char *>le, False)
        return le
    return out


def properties_length(bytes data, bint little_endian=False):
    return props_convert(data, len(data), NULL, little_endian)


def convert_properties(bytes data, bint from_disk):
    """The same property list in the other byte order (wire <-> disk)."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, len(data))
    cdef Py_ssize_t n = props_convert(data, len(data), <char *><const char *>out, from_disk)
    if n != len(data):
        raise SyntaxError_("bytes after the property list")
    return out
