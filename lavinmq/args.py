"""Redeclare equivalence: flags compared exactly, argument tables with
numbers compared by value (10 == 10.0)."""
from lavinmq.errors import PreconditionFailed


class _Empty(dict):
    """An empty table that refuses to change: shared by every queue without
    arguments or policies (three dicts a queue, 19 MB for 100,000 queues).
    A dict, so that the API serialises it as one."""
    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError("the shared empty table cannot change: make a dict")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = __ior__ = _refuse


EMPTY = _Empty()


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


def check_equivalent(kind, name, vhost, flags, mine_args, their_args, class_id):
    """Raise 406 for the first flag (name, current, requested) or argument
    that differs from what the existing queue/exchange has."""
    where = f"for {kind} '{name}' in vhost '{vhost}'"
    for flag, mine, theirs in flags:
        if mine != theirs:
            raise PreconditionFailed(f"inequivalent arg '{flag}' {where}: received "
                                     f"'{str(theirs).lower()}' but current is '{str(mine).lower()}'",
                                     class_id, 10)
    diff = args_equal(mine_args, their_args)
    if diff is not None:
        raise PreconditionFailed(f"inequivalent arg '{diff}' {where}", class_id, 10)
