import pytest

from lavinmq.exchange import headers_match, topic_matches


@pytest.mark.parametrize("pattern,key,expected", [
    ("a.b.c", "a.b.c", True),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("#", "", True),
    ("#", "x.y", True),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.x.y.c", False),
    ("*", "", True),
    ("*", "a.b", False),
    ("#.#", "a", True),
])
def test_topic(pattern, key, expected):
    assert topic_matches(pattern.split("."), key.split(".")) is expected


def test_headers_all_any():
    assert headers_match({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3})
    assert not headers_match({"x-match": "all", "a": 1, "b": "x"}, {"a": 1})
    assert headers_match({"x-match": "any", "a": 1, "b": "x"}, {"a": 1})
    assert not headers_match({"x-match": "any", "a": 2}, {"a": 1})
    # x- keys are ignored unless the mode says -with-x
    assert headers_match({"x-match": "all", "x-foo": 1}, {})
    assert not headers_match({"x-match": "all-with-x", "x-foo": 1}, {})
    assert headers_match({"x-match": "any-with-x", "x-foo": 1}, {"x-foo": 1})
