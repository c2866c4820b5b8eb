"""What must not depend on the machine: these run on x86-64 in `./dev test`
and on aarch64 under emulation (tools/arm64.py test), where a `char` is
unsigned, loads may be unaligned and pages may be 16 or 64 KiB.

A data directory is portable: the store in tests/fixtures/store-x86_64 was
written by the x86-64 build (regenerate on purpose with
`python -m tests.unit.test_portability DIR`); here it must read back record
for record, and what this machine writes must be the same bytes."""
import os
import shutil
import sys
import zlib
from pathlib import Path

from lavinmq._core import codec
from lavinmq._core.routing import TopicMatcher, crc32
from lavinmq._core.segment import MessageStore
from tests.unit.records import record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "store-x86_64"
SEGMENT = 16384         # a few segments' worth of sample records


def sample():
    """Records that exercise every byte value, high-bit names, negative and
    64-bit header values, odd lengths (so that records start unaligned)."""
    out = []
    for i in range(120):
        body = bytes((i * 7 + k) & 0xFF for k in range(i * 3 % 257))
        props = {"headers": {"i8": -(i % 128), "i64": -(1 << 62) + i, "u": (1 << 63) - 1 - i,
                             "s": "é€" * (i % 5), "t": {"nested": [i, -i, "ü"]}},
                 "delivery_mode": 2, "priority": i % 10, "timestamp": 4_000_000_000 + i}
        out.append(record(body, "ex.é.€".encode(), f"rk.{i}.\u00ff".encode(), props,
                          ts=1_700_000_000_000 + i * 999_983))
    return out


def write_sample(directory):
    s = MessageStore(str(directory), SEGMENT)
    for r in sample():
        s.py_append(r)
    # ack every third one: the ack files are part of the format too
    taken = [s.py_shift() for _ in range(len(sample()))]
    for m in taken[::3]:
        s.py_delete(m[0])
    s.close()


def same_data(a, b):
    """Equal, but for zeros preallocated past the data (their length may
    follow the page size)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n] and not a[n:].strip(b"\0") and not b[n:].strip(b"\0")


def test_a_store_written_on_x86_64_reads_here(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "q")
    s = MessageStore(str(tmp_path / "q"), SEGMENT)
    got = []
    while (m := s.py_shift()) is not None:
        got.append(m[1])
    s.close()
    want = [r for k, r in enumerate(sample()) if k % 3]
    assert got == want


def test_what_this_machine_writes_is_x86_64s_bytes(tmp_path):
    write_sample(tmp_path)
    mine = sorted(p.name for p in tmp_path.iterdir())
    assert mine == sorted(p.name for p in FIXTURE.iterdir())
    for name in mine:
        assert same_data((tmp_path / name).read_bytes(), (FIXTURE / name).read_bytes()), name


def test_properties_with_high_bytes_and_negative_values_decode_the_same():
    props = {"headers": {"b": -128, "s": -32768, "i": -(1 << 31), "l": -(1 << 63),
                         "name\u00e9": "\u00ff\u0080", "t": 4_000_000_000},
             "content_type": "application/\u00e9", "expiration": "60000", "priority": 255}
    for disk in (False, True):
        back = codec.decode_properties(codec.encode_properties(props, disk), disk)
        assert back["headers"] == props["headers"], disk
        assert back["content_type"] == "application/\u00e9" and back["priority"] == 255


def test_hashes_of_high_bytes_are_zlibs():
    # consistent-hash exchanges place keys by crc32: a signed char would move
    # every key with a byte >= 0x80 to another queue on arm64
    for b in range(256):
        assert crc32(bytes([b])) == zlib.crc32(bytes([b]))
    assert crc32("ключ.€".encode()) == zlib.crc32("ключ.€".encode())


def test_topic_words_with_high_bytes():
    m = TopicMatcher()
    m.add("d\u00e9v.*.\u20ac".encode(), "q1", False)
    m.add("#.\u00ff".encode(), "q2", False)
    assert m.lookup("d\u00e9v.1.\u20ac".encode()) == ["q1"]
    assert m.lookup("x.y.\u00ff".encode()) == ["q2"]
    assert m.lookup("dev.1.\u20ac".encode()) == []


def test_segments_of_no_page_multiple_hold_and_reopen(tmp_path):
    # reservations round up to the machine's page size (4, 16 or 64 KiB) and
    # must stop at the segment's end whatever that size is
    size = 3 * 4096 + 100
    s = MessageStore(str(tmp_path), size)
    recs = sample()
    for r in recs:
        s.py_append(r)
    s.close()
    assert all(os.path.getsize(p) <= size for p in tmp_path.glob("msgs.*"))
    s = MessageStore(str(tmp_path), size)
    got = []
    while (m := s.py_shift()) is not None:
        got.append(m[1])
    s.close()
    assert got == recs


if __name__ == "__main__":       # regenerate the fixture (on x86-64, on purpose)
    target = Path(sys.argv[1])
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    write_sample(target)
    print("\n".join(f"{p.name} {p.stat().st_size}" for p in sorted(target.iterdir())))
