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
import logging
import os
import re

import orjson

from lavinmq.arguments import EMPTY
from lavinmq.arguments import POLICY_KEYS, validate_policy_definition
from lavinmq.clustering import changes

try:        # linear-time matching: a pattern from a policymaker must not stall the loop
    import re2 as _regex
except ImportError:     # pragma: no cover - google-re2 is a dependency
    _regex = re

log = logging.getLogger("lavinmq.policy")

APPLY_TO = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
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
    __slots__ = ("name", "pattern", "apply_to", "priority", "definition", "_re")

    def __init__(self, name, pattern, apply_to, priority, definition):
        self.name, self.pattern, self.apply_to = name, pattern, apply_to
        self.priority, self.definition = priority, definition
        self._re = _regex.compile(pattern)

    def matches(self, name, kind):
        if self.apply_to == "exchanges" and kind != "exchange":
            return False
        if self.apply_to != "all" and self.apply_to != "exchanges" and kind != "queue":
            return False
        return self._re.search(name) is not None

    def to_json(self):
        return {"pattern": self.pattern, "apply-to": self.apply_to, "priority": self.priority,
                "definition": self.definition}


def check_policy(body, operator=False):
    """A policy body from the API or a definitions file -> its stored form;
    raises ValueError naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("a policy must be an object")
    pattern = body.get("pattern")
    if not isinstance(pattern, str):
        raise ValueError("pattern is required (a regular expression)")
    try:
        _regex.compile(pattern)
    except Exception as exc:
        raise ValueError(f"pattern: {exc}") from None
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
    return {"pattern": pattern, "apply-to": apply_to, "priority": priority, "definition": definition}


class PolicyStore:
    """The policies and operator policies of one vhost."""

    def __init__(self, vhost):
        self.vhost = vhost
        self.policies = self._load("policies.json")
        self.operator = self._load("operator_policies.json")

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
                p = check_policy(body, operator=filename.startswith("operator"))
                out[name] = Policy(name, p["pattern"], p["apply-to"], p["priority"], p["definition"])
            except ValueError as exc:
                log.error("vhost %s: policy %r in %s ignored: %s", self.vhost.name, name, filename, exc)
        return out

    def _save(self, filename, table):
        data = orjson.dumps({n: p.to_json() for n, p in table.items()})
        tmp = self._path(filename) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path(filename))
        changes.changed(self._path(filename))

    # -- changes ----------------------------------------------------------------

    def set(self, name, body, operator=False):
        """-> True if it replaced one. Applies at once."""
        p = check_policy(body, operator)
        table, filename = self._table(operator)
        existed = name in table
        table[name] = Policy(name, p["pattern"], p["apply-to"], p["priority"], p["definition"])
        self._save(filename, table)
        self.apply_all()
        return existed

    def delete(self, name, operator=False):
        """-> False if there was none. Un-applies at once."""
        table, filename = self._table(operator)
        if table.pop(name, None) is None:
            return False
        self._save(filename, table)
        self.apply_all()
        return True

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

    @staticmethod
    def _best(table, name, kind):
        best = None
        for p in table.values():
            if p.matches(name, kind) and (best is None or p.priority > best.priority
                                          or (p.priority == best.priority and p.name < best.name)):
                best = p
        return best

    def effective(self, name, kind, arguments):
        """-> (policy, operator policy, effective definition, settings) for a
        queue or exchange: settings maps policy keys to what applies, with
        the object's own arguments taken into account."""
        policy = self._best(self.policies, name, kind)
        op = self._best(self.operator, name, kind) if kind == "queue" else None
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
        q.apply_effective(*self.effective(q.name, "queue", q.arguments))
        self._federation_follows(q, "queue")

    def apply_to_exchange(self, ex):
        policy, _, definition, settings = self.effective(ex.name, "exchange", ex.arguments)
        ex.policy = policy.name if policy else None
        ex.effective_policy_definition = definition
        # the exchange's own argument wins over this (the routing core keeps both)
        ex.set_alternate_policy(policy.definition.get("alternate-exchange") if policy else None)
        self._federation_follows(ex, "exchange")

    def _federation_follows(self, obj, kind):
        # federation-upstream(-set) keys make links (lavinmq.federation), while the vhost has upstreams
        federation = getattr(self.vhost, "federation", None)
        if federation is not None:
            federation.policy_applied(obj, kind)

    def apply_all(self):
        """Policies changed: every queue and exchange gets what applies now."""
        for q in list(self.vhost.queues.values()):
            try:
                self.apply_to_queue(q)
            except Exception:
                log.exception("vhost %s: applying policies to queue %s failed", self.vhost.name, q.name)
        for ex in self.vhost.exchanges.values():
            self.apply_to_exchange(ex)
