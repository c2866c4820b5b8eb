"""What the broker should hold, computed without it: queues and their
messages (in delivery order, with their redelivered flag and delivery
count), exchanges (persistent ones with their kept window, delayed ones
with what they hold), bindings and policies. tests/model/walk.py drives the
real broker and this model through the same operations and compares.

Semantics modelled (each checked against the broker's code, cited):
- classic queue: delivery in publish order; a requeued message goes back to
  its place (lavinmq/_core/segment.pyx shift/requeue: requeued first, in
  position order, which is publish order)
- priority queue: highest level first (level = min(priority, x-max-priority)),
  publish order within a level (prio_store.pyx)
- x-delivery-limit L: a delivery that needs an ack counts; from the second on
  it carries x-delivery-count (the deliveries before it); a requeue of a
  message delivered more than L times drops it (queue.pyx reject)
- max-length (a policy): after a publish or a policy change the head (the
  next to deliver) is dropped while more than max-length are ready
- stream: offsets from 1 per stream (re)created; purge drops sealed segments
  (the broker says how many: the oldest that many)
- persistent exchange (x-persist-messages N): every message that reaches it
  is kept (the newest N); every copy of that message the queues get carries
  x-offset; a new binding with x-from/x-tail gets the kept ones it matches
- x-delayed-message: x-delay > 0 waits in amq.delayed.<exchange>, then is
  routed with the bindings of that moment"""
import re

# -- names and kinds --------------------------------------------------------------------------

QUEUE_NAMES = ("q0", "q1", "q2", "q3")          # classic family: policies match these
STREAM_NAMES = ("s0", "s1")
EXCHANGE_NAMES = ("x0", "x1", "x2", "x3")
ROUTING_KEYS = ("a", "b", "c.d", "c.e.d", "z")
BINDING_KEYS = {"direct": ("a", "b", "c.d"), "topic": ("a", "#", "*.d", "c.#", "c.d"),
                "fanout": ("", "a")}
POLICY_NAMES = ("pol0", "pol1")                 # priority 0 and 1: never a tie
POLICY_PATTERNS = ("^q", "^q[01]$", "^q[23]$", "^q0$")
LONG_DELAY = 3_600_000                          # ms: held for the whole run
FIRST_OFFSET = 1                                # streams and persistent exchanges


class ModelError(AssertionError):
    """The broker and the model disagree."""


def topic_match(pattern, key):
    p, k = pattern.split("."), key.split(".")
    memo = {}

    def m(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(p):
            r = j == len(k)
        elif p[i] == "#":
            r = m(i + 1, j) or (j < len(k) and m(i, j + 1))
        elif j == len(k):
            r = False
        else:
            r = (p[i] == "*" or p[i] == k[j]) and m(i + 1, j + 1)
        memo[(i, j)] = r
        return r
    return m(0, 0)


def key_matches(ex_type, binding_key, routing_key):
    if ex_type == "fanout":
        return True
    if ex_type == "topic":
        return topic_match(binding_key, routing_key)
    return binding_key == routing_key


# -- messages ---------------------------------------------------------------------------------


def body_for(seq):
    """Distinct, checkable bodies of 0..~300 bytes."""
    n = (seq * 37) % 300
    return b"m%07d|" % seq + bytes((seq + 13 * i) % 256 for i in range(n))


class Msg:
    """One published message, as it was sent."""
    __slots__ = ("seq", "priority", "headers", "rk")

    def __init__(self, seq, priority, headers, rk):
        self.seq, self.priority, self.headers, self.rk = seq, priority, headers, rk


class Entry:
    """A message in one queue."""
    __slots__ = ("seq", "pos", "level", "stamp", "redelivered", "deliveries", "flags_known")

    def __init__(self, seq, pos, level, stamp):
        self.seq, self.pos, self.level, self.stamp = seq, pos, level, stamp
        self.redelivered = False
        self.deliveries = 0         # counted deliveries (x-delivery-limit queues)
        self.flags_known = True     # False: adopt what the broker shows next


# -- definitions -------------------------------------------------------------------------------


class QueueDef:
    def __init__(self, name, kind, durable, limit=None, max_priority=5, small_segments=False):
        self.name, self.kind, self.durable = name, kind, durable
        self.limit = limit
        self.max_priority = max_priority
        self.small_segments = small_segments

    @property
    def arguments(self):
        if self.kind == "priority":
            return {"x-max-priority": self.max_priority}
        if self.kind == "limited":
            return {"x-delivery-limit": self.limit}
        if self.kind == "stream":
            args = {"x-queue-type": "stream"}
            if self.small_segments:
                args["x-stream-max-segment-size-bytes"] = 4096
            return args
        return {}

    @property
    def api_type(self):
        return "stream" if self.kind == "stream" else "classic"

    def describe(self):
        return f"{self.name}({self.kind}{'' if self.durable else ',transient'}{self.arguments or ''})"


class ExchangeDef:
    def __init__(self, name, kind, durable, keep=5):
        self.name, self.kind, self.durable, self.keep = name, kind, durable, keep

    @property
    def type(self):
        """The routing type (what the API shows)."""
        return {"delayed": "direct", "persistent": "topic"}.get(self.kind, self.kind)

    @property
    def declare_type(self):
        return "x-delayed-message" if self.kind == "delayed" else self.type

    @property
    def declare_arguments(self):
        if self.kind == "delayed":
            return {"x-delayed-type": "direct"}
        if self.kind == "persistent":
            return {"x-persist-messages": self.keep}
        return {}

    @property
    def api_arguments(self):
        if self.kind == "delayed":
            return {"x-delayed-exchange": True}
        return self.declare_arguments

    def describe(self):
        return f"{self.name}({self.kind}{'' if self.durable else ',transient'})"


class QueueState:
    def __init__(self, qdef):
        self.d = qdef
        self.ready = []             # [Entry] in delivery order
        self.unacked = {}           # seq -> Entry, held by the walk's holder channel
        self.next_pos = 0
        self.stream = []            # streams: [(offset, seq, stamp)]
        self.next_offset = FIRST_OFFSET
        self.gone = {}              # seq -> (Entry, cause) since the last verification

    def key(self, e):
        return (-e.level, e.pos) if self.d.kind == "priority" else (e.pos,)

    def insert(self, e):
        """Into its place in delivery order."""
        k = self.key(e)
        i = len(self.ready)
        while i > 0 and self.key(self.ready[i - 1]) > k:
            i -= 1
        self.ready.insert(i, e)


class ExchangeState:
    def __init__(self, xdef):
        self.d = xdef
        self.kept = []              # persistent: [(offset, seq, rk)], the newest d.keep
        self.next_offset = FIRST_OFFSET
        self.held = []              # delayed: seqs held for LONG_DELAY


# -- the model ---------------------------------------------------------------------------------


class Model:
    def __init__(self):
        self.queues = {}            # name -> QueueState
        self.exchanges = {}         # name -> ExchangeState
        self.bindings = set()       # (source, "queue"|"exchange", destination, key, frozen args)
        self.policies = {}          # name -> (pattern, max_length)
        self.msgs = {}              # seq -> Msg
        self.next_seq = 0
        self.deleted = {}           # (queue name, seq) -> cause: must never come back

    # -- policies -----------------------------------------------------------------------------

    def policy_for(self, qname):
        """-> (policy name, max-length) in effect, or (None, None)."""
        if not qname.startswith("q"):
            return None, None
        best = None
        for name in POLICY_NAMES:       # in priority order: the last match wins
            p = self.policies.get(name)
            if p is not None and re.search(p[0], qname):
                best = (name, p[1])
        return best or (None, None)

    def enforce_max_length(self, q, cause="max-length"):
        _, max_len = self.policy_for(q.d.name)
        if max_len is None or q.d.kind == "stream":
            return
        while len(q.ready) > max_len:
            e = q.ready.pop(0)
            q.gone[e.seq] = (e, cause)

    # -- routing ------------------------------------------------------------------------------

    def route(self, exchange, rk):
        """-> (queue names in no particular order, the persistent exchange on
        the way or None)."""
        if exchange == "":
            return ([rk] if rk in self.queues else []), None
        seen, queues, stack, px = set(), set(), [exchange], None
        while stack:
            name = stack.pop()
            if name in seen or name not in self.exchanges:
                continue
            seen.add(name)
            xs = self.exchanges[name]
            if xs.d.kind == "persistent" and px is None:
                px = name
            for (src, dtype, dst, key, _args) in self.bindings:
                if src == name and key_matches(xs.d.type, key, rk):
                    if dtype == "queue":
                        queues.add(dst)
                    else:
                        stack.append(dst)
        return sorted(queues), px

    def new_msg(self, priority, headers, rk):
        self.next_seq += 1
        m = Msg(self.next_seq, priority, headers, rk)
        self.msgs[m.seq] = m
        return m

    def deliver_routed(self, m, exchange, rk):
        """A confirmed message routed now: into every queue it reaches."""
        queues, px = self.route(exchange, rk)
        stamp = None
        if px is not None:
            xs = self.exchanges[px]
            stamp = xs.next_offset
            xs.next_offset += 1
            xs.kept.append((stamp, m.seq, rk))
            del xs.kept[:-xs.d.keep]
        for qn in queues:
            self.enqueue(self.queues[qn], m.seq, stamp)
        return queues

    def enqueue(self, q, seq, stamp):
        m = self.msgs[seq]
        if q.d.kind == "stream":
            q.stream.append((q.next_offset, seq, stamp))
            q.next_offset += 1
            return
        level = min(m.priority or 0, q.d.max_priority) if q.d.kind == "priority" else 0
        e = Entry(seq, q.next_pos, level, stamp)
        q.next_pos += 1
        q.insert(e)
        self.enforce_max_length(q)

    def replay_to(self, exchange, qname, key, args):
        """A new binding with x-from / x-tail on a persistent exchange: the
        kept messages it matches, oldest first."""
        xs = self.exchanges[exchange]
        picked = list(xs.kept)
        if "x-tail" in args:
            picked = picked[-args["x-tail"]:] if args["x-tail"] > 0 else []
        for offset, seq, rk in picked:
            if key_matches(xs.d.type, key, rk):
                self.enqueue(self.queues[qname], seq, offset)

    # -- consumption ----------------------------------------------------------------------

    def take(self, q, no_ack):
        """The head, delivered: -> (Entry, expected x-delivery-count or None)."""
        e = q.ready.pop(0)
        count_header = None
        if q.d.kind == "limited" and not no_ack:
            if e.deliveries > 0:
                count_header = e.deliveries
            e.deliveries += 1
        return e, count_header

    def settle(self, q, e, how):
        """how: ack | requeue | drop (reject/nack without requeue)."""
        if how == "requeue":
            if q.d.kind == "limited" and e.deliveries > q.d.limit:
                q.gone[e.seq] = (e, "delivery-limit")
                return
            e.redelivered = True
            q.insert(e)
        else:
            q.gone[e.seq] = (e, how)

    # -- definitions ------------------------------------------------------------------------

    def binding_durable(self, b):
        src = self.exchanges[b[0]].d
        dst = (self.queues if b[1] == "queue" else self.exchanges)[b[2]].d
        return src.durable and dst.durable

    def remove_queue(self, name, cause="queue deleted"):
        q = self.queues.pop(name)
        for e in q.ready + list(q.unacked.values()):
            self.deleted[(name, e.seq)] = cause
        for e, _ in q.gone.values():
            self.deleted[(name, e.seq)] = cause
        self.bindings = {b for b in self.bindings if not (b[1] == "queue" and b[2] == name)}
        return q

    def remove_exchange(self, name):
        self.exchanges.pop(name)
        self.bindings = {b for b in self.bindings
                         if b[0] != name and not (b[1] == "exchange" and b[2] == name)}

    def expected_definitions(self):
        """What the management API should list: (queues, exchanges, bindings, policies)."""
        queues = {}
        for name, q in self.queues.items():
            pol, _ = self.policy_for(name)
            count = len(q.stream) if q.d.kind == "stream" else len(q.ready) + len(q.unacked)
            queues[name] = {"durable": q.d.durable, "arguments": q.d.arguments, "type": q.d.api_type,
                            "policy": pol, "messages": count}
        exchanges = {}
        for name, xs in self.exchanges.items():
            exchanges[name] = {"type": xs.d.type, "durable": xs.d.durable, "arguments": xs.d.api_arguments}
            if xs.d.kind == "delayed":
                queues["amq.delayed." + name] = {"durable": xs.d.durable, "arguments": {}, "type": "classic",
                                                 "policy": None, "messages": len(xs.held)}
        bindings = {(b[0], b[1], b[2], b[3], b[4]) for b in self.bindings}
        policies = {name: {"pattern": p[0], "definition": {"max-length": p[1]}, "apply-to": "queues",
                           "priority": POLICY_NAMES.index(name)} for name, p in self.policies.items()}
        return queues, exchanges, bindings, policies

    # -- restarts -----------------------------------------------------------------------------

    def restarted(self, clean, check_flags):
        """The broker stopped (clean: SIGTERM, else SIGKILL) and started:
        what is not durable is gone. Held messages: a clean stop closes the
        holder's connection, which requeues them (a delivery-limited one
        delivered more than its limit is dropped); after a kill they are
        simply there again. At boot max-length policies drop the head of
        what is over. What the broker may not have kept is marked so that
        verification adopts what it shows."""
        for name in [n for n, x in self.exchanges.items() if not x.d.durable]:
            self.remove_exchange(name)
        for name in [n for n, q in self.queues.items() if not q.d.durable]:
            self.remove_queue(name, "transient queue at a restart")
        for q in self.queues.values():
            for e in q.unacked.values():
                if clean:
                    self.settle(q, e, "requeue")
                else:
                    e.flags_known = False
                    q.insert(e)
            q.unacked.clear()
            if not clean or not check_flags:
                for e in q.ready:
                    e.flags_known = False
            self.enforce_max_length(q, "max-length at boot")
