"""Argument tables compared on redeclare: numbers by value (10 == 10.0),
everything else exactly."""


def _norm(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode()
        except UnicodeDecodeError:
            return bytes(v)
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def args_equal(a, b):
    """None when equivalent, else the name of the first differing key."""
    a = a or {}
    b = b or {}
    for key in sorted(set(a) | set(b)):
        if _norm(a.get(key)) != _norm(b.get(key)):
            return key
    return None
