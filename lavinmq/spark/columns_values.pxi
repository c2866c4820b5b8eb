# Field table values as text: the headers map's values (included by _columns.pyx)

# -- field table values as strings ----------------------------------------------

cdef Py_ssize_t value_size(char t, const char *p, Py_ssize_t avail) noexcept nogil:
    """Bytes of a field value after its type octet, -1 if it does not fit."""
    cdef Py_ssize_t n
    if t == b"t" or t == b"b" or t == b"B":
        n = 1
    elif t == b"s" or t == b"u":
        n = 2
    elif t == b"I" or t == b"i" or t == b"f":
        n = 4
    elif t == b"l" or t == b"L" or t == b"d" or t == b"T":
        n = 8
    elif t == b"D":
        n = 5
    elif t == b"V":
        n = 0
    elif t == b"S" or t == b"x" or t == b"F" or t == b"A":
        if avail < 4:
            return -1
        n = 4 + <Py_ssize_t>be32(p)
    else:
        return -1
    return n if n <= avail else -1


cdef int put_json_string(Buf out, const char *s, Py_ssize_t n) except -1:
    cdef Py_ssize_t i
    cdef uint8_t c
    cdef char esc[8]
    out.put(b'"', 1)
    for i in range(n):
        c = <uint8_t>s[i]
        if c == b'"' or c == b'\\':
            out.put(b"\\", 1)
            out.put(&s[i], 1)
        elif c < 0x20:
            snprintf(esc, 8, "\\u%04x", c)
            out.put(esc, 6)
        else:
            out.put(&s[i], 1)
    out.put(b'"', 1)
    return 0


cdef bint valid_utf8(const char *s, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i = 0, k
    cdef uint8_t c
    while i < n:
        c = <uint8_t>s[i]
        if c < 0x80:
            i += 1
            continue
        if c >= 0xf8 or c < 0xc2:
            return False
        k = 1 if c < 0xe0 else (2 if c < 0xf0 else 3)
        if i + k >= n:
            return False
        i += 1
        while k:
            if (<uint8_t>s[i] & 0xc0) != 0x80:
                return False
            i += 1
            k -= 1
    return True


cdef int put_hex(Buf out, const char *s, Py_ssize_t n) except -1:
    cdef Py_ssize_t i
    cdef char h[3]
    for i in range(n):
        snprintf(h, 3, "%02x", <uint8_t>s[i])
        out.put(h, 2)
    return 0


cdef Py_ssize_t render(Buf out, char t, const char *v, Py_ssize_t avail, bint json, int depth) except -2:
    """The text of a field value into out: strings as they are (quoted in
    JSON), numbers in decimal, booleans true/false, byte arrays as text when
    they are UTF-8 (hex otherwise), tables and arrays as JSON. -> bytes of
    the value consumed, -1 for malformed (nothing sensible written)."""
    cdef Py_ssize_t n = value_size(t, v, avail), pos, kl, m
    cdef char buf[64]
    cdef int k = 0
    cdef int64_t i = 0
    cdef float f
    cdef double d
    cdef uint32_t u32
    cdef uint64_t u64
    cdef bint first
    if n < 0 or depth > MAX_DEPTH:
        return -1
    if t == b"S" or t == b"x":
        m = n - 4
        if t == b"x" and not valid_utf8(v + 4, m):
            if json:
                out.put(b'"', 1)
            put_hex(out, v + 4, m)
            if json:
                out.put(b'"', 1)
        elif json:
            put_json_string(out, v + 4, m)
        else:
            out.put(v + 4, m)
        return n
    if t == b"t":
        if v[0]:
            out.put(b"true", 4)
        else:
            out.put(b"false", 5)
        return n
    if t == b"V":
        out.put(b"null", 4)
        return n
    if t == b"f":
        u32 = be32(v)
        memcpy(&f, &u32, 4)
        k = snprintf(buf, 64, "%.9g", f)
        out.put(buf, k)
        return n
    if t == b"d":
        u64 = be64(v)
        memcpy(&d, &u64, 8)
        k = snprintf(buf, 64, "%.17g", d)
        out.put(buf, k)
        return n
    if t == b"D":
        i = <int32_t>be32(v + 1)
        k = snprintf(buf, 64, "%lld", <long long>i)
        if <uint8_t>v[0] and k > 0:
            # decimal: digits with the point scale places from the right
            _put_scaled(out, buf, k, <uint8_t>v[0])
        else:
            out.put(buf, k)
        return n
    if t == b"F" or t == b"A":
        out.put(b"{" if t == b"F" else b"[", 1)
        pos = 4
        first = True
        while pos < n:
            if not first:
                out.put(b",", 1)
            first = False
            if t == b"F":
                kl = <uint8_t>v[pos]
                if pos + 1 + kl + 1 > n:
                    return -1
                put_json_string(out, v + pos + 1, kl)
                out.put(b":", 1)
                pos += 1 + kl
            if pos >= n:
                return -1
            m = render(out, v[pos], v + pos + 1, n - pos - 1, True, depth + 1)
            if m < 0:
                return -1
            pos += 1 + m
        out.put(b"}" if t == b"F" else b"]", 1)
        return n
    # integers
    if t == b"b":
        i = <int8_t>v[0]
    elif t == b"B":
        i = <uint8_t>v[0]
    elif t == b"s":
        i = <int16_t>be16(v)
    elif t == b"u":
        i = be16(v)
    elif t == b"I":
        i = <int32_t>be32(v)
    elif t == b"i":
        i = be32(v)
    elif t == b"l" or t == b"T":
        i = <int64_t>be64(v)
    elif t == b"L":
        k = snprintf(buf, 64, "%llu", <unsigned long long>be64(v))
        out.put(buf, k)
        return n
    k = snprintf(buf, 64, "%lld", <long long>i)
    out.put(buf, k)
    return n


cdef int _put_scaled(Buf out, const char *digits, int k, int scale) except -1:
    cdef int neg = digits[0] == b"-"
    cdef int nd = k - neg
    if neg:
        out.put(b"-", 1)
    if nd <= scale:
        out.put(b"0.", 2)
        while nd < scale:
            out.put(b"0", 1)
            scale -= 1
        out.put(digits + neg, k - neg)
    else:
        out.put(digits + neg, nd - scale)
        out.put(b".", 1)
        out.put(digits + k - scale, scale)
    return 0
