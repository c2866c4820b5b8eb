"""WriteBuffer's shortstr copy (buffer.copy_short: plain moves, not memcpy)
writes every length from every alignment exactly, and nothing past it."""
import os

import pytest

from lavinmq._core.buffer import WriteBuffer


@pytest.mark.parametrize("offset", range(9))
def test_every_shortstr_length_from_every_alignment(offset):
    for n in range(256):
        data = os.urandom(n)
        wb = WriteBuffer()
        wb.py_write_raw(b"\xaa" * offset)
        wb.py_write_shortstr(data)
        wb.py_write_raw(b"\x55" * 17)
        assert wb.getvalue() == b"\xaa" * offset + bytes([n]) + data + b"\x55" * 17, n


def test_a_shortstr_longer_than_255_bytes_is_refused():
    wb = WriteBuffer()
    with pytest.raises(ValueError):
        wb.py_write_shortstr(b"x" * 256)
    assert len(wb) == 0
