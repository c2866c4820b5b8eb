"""Policies and operator policies of a vhost, and the effective settings
they give its queues and exchanges.

As RabbitMQ: of the policies whose pattern matches an object's name (and
whose apply-to fits it), the one with the highest priority applies; an
operator policy is chosen the same way among the operator policies. For a
limit (TTLs, lengths, expiry, delivery limit) the strictest of argument,
policy and operator policy wins; for the other keys the queue's or
exchange's own argument wins over the policy. Kept per vhost in
policies.json and operator_policies.json, applied at once to what exists
and to what is declared later.
"""
import asyncio
import contextlib
import logging
import os
import threading

import orjson

from lavinmq.arguments import EMPTY
from lavinmq.arguments import POLICY_KEYS, validate_policy_definition
from lavinmq.clustering import changes

from lavinmq.name_regex import NameRegex
from lavinmq.queue import queue_type

log = logging.getLogger("lavinmq.policy")

# Every policy's pattern is searched in each queue or exchange name that is
# declared, and a change is matched against every existing one: what a
# policymaker sets is work for the event loop. RE2 matches in linear time,
# but its cost per byte grows with the compiled program, so the programs of
# a vhost's policies are bounded in all (per table: a policymaker cannot
# use up the operator policies' share). ~20 instructions make an ordinary
# pattern (`^orders\.` is 4); at the worst RE2 spends ~5 ns per instruction
# and byte of name, so a 255-byte name costs at most ~28 ms to match here.
DEFAULT_MAX_INSTRUCTIONS = 20_000
REGEX_MAX_MEM = 1 << 20     # a pattern's program and DFA cache; RE2's default is 8 MiB each


def compile_pattern(pattern):
    try:
        return NameRegex(pattern, REGEX_MAX_MEM)
    except ValueError as exc:
        raise ValueError(f"pattern: {exc}") from None

APPLY_TO = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
# what each apply-to reaches: exchanges, and queues by lavinmq.queue.queue_type. As
# LavinMQ (no quorum queues; its queues take what RabbitMQ lets quorum queues
# take), classic_queues and quorum_queues both reach every queue but streams.
APPLY_TARGETS = {"all": frozenset(("exchange", "classic", "quorum", "stream")),
                 "queues": frozenset(("classic", "quorum", "stream")),
                 "exchanges": frozenset(("exchange",)),
                 "classic_queues": frozenset(("classic", "quorum")),
                 "quorum_queues": frozenset(("classic", "quorum")),
                 "streams": frozenset(("stream",))}
# keys where the smallest of argument, policy and operator policy applies
LIMIT_KEYS = ("message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit",
              "consumer-timeout")
# what an operator policy may set (RabbitMQ's operator_policy_validator, + overflow)
OPERATOR_KEYS = {"expires", "message-ttl", "max-length", "max-length-bytes", "max-in-memory-length",
                 "max-in-memory-bytes", "delivery-limit", "queue-version", "overflow"}
# queue argument -> policy key
QUEUE_ARG_KEYS = {"x-message-ttl": "message-ttl", "x-expires": "expires", "x-max-length": "max-length",
                  "x-max-length-bytes": "max-length-bytes", "x-overflow": "overflow",
                  "x-dead-letter-exchange": "dead-letter-exchange",
                  "x-dead-letter-routing-key": "dead-letter-routing-key",
                  "x-delivery-limit": "delivery-limit", "x-consumer-timeout": "consumer-timeout",
                  "x-max-age": "max-age"}
EXCHANGE_ARG_KEYS = {"alternate-exchange": "alternate-exchange"}


AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "D": 86400, "M": 30 * 86400, "Y": 365 * 86400}


def age_seconds(value):
    """A max-age such as "7D" in seconds."""
    return int(value[:-1]) * AGE_UNITS[value[-1]]


def _shorter(a, b):
    if b is None:
        return a
    return a if age_seconds(a) <= age_seconds(b) else b


class Policy:
    __slots__ = ("name", "pattern", "apply_to", "priority", "definition", "_re", "instructions", "_targets")

    def __init__(self, name, pattern, apply_to, priority, definition, regex=None):
        self.name, self.pattern, self.apply_to = name, pattern, apply_to
        self._targets = APPLY_TARGETS[apply_to]
        self.priority, self.definition = priority, definition
        self._re = regex if regex is not None else compile_pattern(pattern)
        self.instructions = self._re.programsize

    def matches(self, name, target):
        """target: "exchange", or a queue's queue_type."""
        return target in self._targets and self._re.search(name)

    def to_json(self):
        return {"pattern": self.pattern, "apply-to": self.apply_to, "priority": self.priority,
                "definition": self.definition}


def check_policy(body, operator=False):
    """A policy body from the API or a definitions file -> its stored form;
    raises ValueError naming what is wrong."""
    return checked_policy(body, operator)[0]


def checked_policy(body, operator=False, compiled=None):
    """-> (stored form, its compiled pattern), as check_policy; compiled
    (pattern -> NameRegex) may hold the pattern compiled already."""
    if not isinstance(body, dict):
        raise ValueError("a policy must be an object")
    pattern = body.get("pattern")
    if not isinstance(pattern, str):
        raise ValueError("pattern is required (a regular expression)")
    regex = compiled.get(pattern) if compiled else None
    if regex is None:
        regex = compile_pattern(pattern)
    apply_to = body.get("apply-to", "all")
    if apply_to not in APPLY_TO:
        raise ValueError(f"apply-to must be one of {', '.join(APPLY_TO)}")
    priority = body.get("priority", 0)
    if isinstance(priority, str) and priority.lstrip("-").isdigit():
        priority = int(priority)        # lavinmqctl and old exports send strings
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ValueError("priority must be an integer")
    definition = validate_policy_definition(body.get("definition"))
    if operator:
        unknown = sorted(set(definition) - OPERATOR_KEYS)
        if unknown:
            raise ValueError(f"not allowed in an operator policy: {', '.join(unknown)}")
        if apply_to == "exchanges":
            raise ValueError("operator policies apply to queues")
    return {"pattern": pattern, "apply-to": apply_to, "priority": priority, "definition": definition}, regex


class PolicyStore:
    """The policies and operator policies of one vhost."""

    def __init__(self, vhost):
        self.vhost = vhost
        self.max_instructions = DEFAULT_MAX_INSTRUCTIONS     # per table; the server sets its setting
        self.policies = self._load("policies.json")
        self.operator = self._load("operator_policies.json")
        self._order = {}            # operator -> the table's policies, the one that wins first
        self._instructions = {False: sum(p.instructions for p in self.policies.values()),
                              True: sum(p.instructions for p in self.operator.values())}
        from lavinmq.policy_apply import PolicyApplier
        self.applier = PolicyApplier(vhost)
        self._unsaved = set()       # tables changed and not written yet
        self._saving = None         # the task writing them
        self._generation = 0
        self._written = {}          # path -> generation of the snapshot on disk
        self._write_lock = threading.Lock()

    # -- files ------------------------------------------------------------------

    def _path(self, filename):
        return os.path.join(self.vhost.dir, filename)

    def _load(self, filename):
        out = {}
        try:
            with open(self._path(filename), "rb") as f:
                data = orjson.loads(f.read())
        except FileNotFoundError:
            return out
        except ValueError as exc:
            log.error("vhost %s: %s is not JSON, ignored: %s", self.vhost.name, filename, exc)
            return out
        for name, body in data.items():
            try:
                p, regex = checked_policy(body, operator=filename.startswith("operator"))
                out[name] = Policy(name, p["pattern"], p["apply-to"], p["priority"], p["definition"], regex)
            except ValueError as exc:
                log.error("vhost %s: policy %r in %s ignored: %s", self.vhost.name, name, filename, exc)
        return out

    # A table is written (with an fsync) after each change. That fsync took
    # 10-30 ms on a busy disk, on the event loop, at every PUT a
    # policymaker made: it runs in a thread now, the newest snapshot last,
    # and the API answers once it is done (applied()).

    def _save_soon(self):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:            # no loop (boot, a tool): at once
            self._save_now()
            return
        if self._saving is None:
            self._saving = loop.create_task(self._save_in_thread())

    def _snapshot(self, operator):
        table, filename = self._table(operator)
        self._generation += 1
        return self._path(filename), orjson.dumps({n: p.to_json() for n, p in table.items()}), self._generation

    def _save_now(self):
        for operator in sorted(self._unsaved):
            path, data, generation = self._snapshot(operator)
            self._write(path, data, generation)
            changes.changed(path)
        self._unsaved.clear()

    async def _save_in_thread(self):
        loop = asyncio.get_running_loop()
        try:
            while self._unsaved:
                operators, self._unsaved = self._unsaved, set()
                for operator in sorted(operators):
                    path, data, generation = self._snapshot(operator)
                    await loop.run_in_executor(None, self._write, path, data, generation)
                    changes.changed(path)       # (replication: on the loop, not in the thread)
        except OSError as exc:
            log.error("vhost %s: writing its policies failed: %s", self.vhost.name, exc)
            raise
        finally:
            self._saving = None

    def _write(self, path, data, generation):
        """In a thread or not: the newest snapshot of a file is the one that stays."""
        with self._write_lock:
            if generation <= self._written.get(path, 0):
                return
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            self._written[path] = generation

    def close(self):
        """The vhost closes: nothing more is applied; what is not written yet is, now."""
        self.applier.stop()
        if self._unsaved:
            self._save_now()

    # -- changes ----------------------------------------------------------------

    def set(self, name, body, operator=False, regex=None):
        """-> True if it replaced one. Applies at once: to what it can
        change, in slices (lavinmq.policy_apply); `await applied()` waits.
        With regex (from checked_policy), body is already checked."""
        if regex is None:
            p, regex = checked_policy(body, operator)
        else:
            p = body
        table, filename = self._table(operator)
        new = Policy(name, p["pattern"], p["apply-to"], p["priority"], p["definition"], regex)
        old = table.get(name)
        total = self.instructions(operator) - (old.instructions if old else 0) + new.instructions
        if total > self.max_instructions and new.instructions > (old.instructions if old else 0):
            raise ValueError(f"the {'operator ' if operator else ''}policies of vhost '{self.vhost.name}' would "
                             f"compile to {total} RE2 instructions, more than the {self.max_instructions} "
                             f"allowed (max_policy_instructions): fewer or simpler patterns")
        table[name] = new
        self._instructions[operator] = total
        self._changed(operator, filename, table, name)
        return old is not None

    def delete(self, name, operator=False):
        """-> False if there was none. Un-applies at once, as set()."""
        table, filename = self._table(operator)
        old = table.pop(name, None)
        if old is None:
            return False
        self._instructions[operator] -= old.instructions
        self._changed(operator, filename, table, name)
        return True

    def _changed(self, operator, filename, table, name):
        self._order.pop(operator, None)
        self._unsaved.add(operator)
        if _batch is not None:
            _batch.add(self)
            self.applier.note(operator, name)
        else:
            self._save_soon()
            self.applier.changed(operator, name)

    def flush_batch(self):
        self._save_soon()
        self.applier.run()

    def instructions(self, operator):
        return self._instructions[operator]

    def instructions_of(self, operator, name):
        p = (self.operator if operator else self.policies).get(name)
        return 0 if p is None else p.instructions

    async def applied(self):
        """Once every change so far has reached every queue and exchange,
        and the disk."""
        await self.applier.settled()
        while self._saving is not None:
            await asyncio.shield(self._saving)

    def _table(self, operator):
        if operator:
            return self.operator, "operator_policies.json"
        return self.policies, "policies.json"

    def listing(self, operator=False):
        table = self.operator if operator else self.policies
        return [dict(p.to_json(), name=n, vhost=self.vhost.name) for n, p in table.items()]

    def get(self, name, operator=False):
        p = (self.operator if operator else self.policies).get(name)
        return None if p is None else dict(p.to_json(), name=name, vhost=self.vhost.name)

    # -- matching ---------------------------------------------------------------

    def ordered(self, operator):
        """The table's policies in the order they win: highest priority
        first, then by name (RabbitMQ's tie-break)."""
        order = self._order.get(operator)
        if order is None:
            table = self.operator if operator else self.policies
            order = self._order[operator] = sorted(table.values(), key=lambda p: (-p.priority, p.name))
        return order

    def best(self, operator, name, target):
        for p in self.ordered(operator):
            if p.matches(name, target):
                return p
        return None

    def effective(self, name, kind, arguments, target=None):
        """-> (policy, operator policy, effective definition, settings) for a
        queue or exchange: settings maps policy keys to what applies, with
        the object's own arguments taken into account. target: the
        queue's queue_type."""
        target = "exchange" if kind == "exchange" else (target or "classic")
        policy = self.best(False, name, target)
        op = self.best(True, name, target) if kind == "queue" else None
        arg_keys = QUEUE_ARG_KEYS if kind == "queue" else EXCHANGE_ARG_KEYS
        settings = {}
        for arg, key in arg_keys.items():
            value = (arguments or {}).get(arg)
            if value is not None:
                try:
                    settings[key] = POLICY_KEYS[key].check(value)
                except (KeyError, ValueError):
                    pass        # accepted by an older version: ignored, never fatal
        definition = {}
        for source in (policy, op):
            if source is None:
                continue
            for key, value in source.definition.items():
                if key == "max-age":        # the shorter age is the stricter
                    definition[key] = _shorter(value, definition.get(key))
                    settings[key] = _shorter(value, settings.get(key))
                elif key in LIMIT_KEYS:
                    definition[key] = min(value, definition[key]) if key in definition else value
                    settings[key] = min(value, settings[key]) if key in settings else value
                elif source is op:
                    definition[key] = value
                    settings[key] = value
                else:
                    definition[key] = value
                    settings.setdefault(key, value)
        return policy, op, definition or EMPTY, settings or EMPTY

    # -- applying -----------------------------------------------------------------

    def apply_to_queue(self, q):
        q.apply_effective(*self.effective(q.name, "queue", q.arguments, queue_type(q)))
        self._federation_follows(q, "queue")

    def apply_to_exchange(self, ex):
        policy, _, definition, settings = self.effective(ex.name, "exchange", ex.arguments)
        ex.policy = policy.name if policy else None
        ex.effective_policy_definition = definition
        # the exchange's own argument wins over this (the routing core keeps both)
        ex.set_alternate_policy(policy.definition.get("alternate-exchange") if policy else None)
        # LavinMQ's delayed-message: the exchange delays from now on (it
        # stays so when the policy goes: its delayed messages are kept)
        if (policy and policy.definition.get("delayed-message") is True and ex.delay_queue is None
                and ex.name != "" and not getattr(ex, "deleted", False)):
            self.vhost.attach_delay_queue(ex)
        self._federation_follows(ex, "exchange")

    def _federation_follows(self, obj, kind):
        # federation-upstream(-set) keys make links (lavinmq.federation), while the vhost has upstreams
        federation = getattr(self.vhost, "federation", None)
        if federation is not None:
            federation.policy_applied(obj, kind)

    def apply_all(self):
        """Every queue and exchange gets what applies now (at boot; a
        change is applied where it can matter, by lavinmq.policy_apply)."""
        for q in list(self.vhost.queues.values()):
            try:
                self.apply_to_queue(q)
            except Exception:
                log.exception("vhost %s: applying policies to queue %s failed", self.vhost.name, q.name)
        for ex in self.vhost.exchanges.values():
            self.apply_to_exchange(ex)


_batch = None       # the stores changed inside batch(), or None outside one


@contextlib.contextmanager
def batch():
    """Many changes (a definitions import): each table is written once at
    the end instead of once per policy. Applying starts at each change and
    runs in slices either way."""
    global _batch
    if _batch is not None:
        yield
        return
    _batch = set()
    try:
        yield
    finally:
        stores, _batch = _batch, None
        for store in stores:
            store.flush_batch()


async def all_applied(vhosts):
    for v in list(vhosts):
        await v.policies.applied()
