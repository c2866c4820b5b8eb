"""The C tables behind delivery limits and deduplication, against Python
dicts over random operations."""
import random
import struct

from lavinmq._core.codec import encode_properties
from lavinmq._core.dedup import Deduper
from lavinmq._core.segment import CountMap


def test_count_map_matches_a_dict():
    rnd = random.Random(7)
    m, ref = CountMap(), {}
    for _ in range(50_000):
        key = rnd.randrange(1, 3000) << 12 | 4
        op = rnd.random()
        if op < 0.5:
            val = rnd.randrange(1, 100)
            m.py_put(key, val)
            ref[key] = val
        elif op < 0.8:
            m.py_remove(key)
            ref.pop(key, None)
        assert m.py_get(key) == ref.get(key, 0)
    assert m.size == len(ref)
    for key, val in ref.items():
        assert m.py_get(key) == val


def record(headers):
    props = encode_properties({"headers": headers}, True)
    return struct.pack("<q", 1) + b"\x00" + b"\x01q" + props + struct.pack("<Q", 1) + b"x"


def test_deduper_window_is_the_last_n_values():
    d = Deduper(None, 100, None)
    rnd = random.Random(3)
    window = []
    for _ in range(20_000):
        key = rnd.randrange(300)
        dup = d.py_seen(record({"x-deduplication-header": key}))
        assert dup == (key in window)
        if not dup:
            window.append(key)
            if len(window) > 100:
                window.pop(0)
    assert not d.py_seen(record({}))            # no header, never a duplicate
    assert not d.py_seen(record({"other": 1}))
