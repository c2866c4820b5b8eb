"""A seeded random walk over the broker and the model together: each step
picks an operation with random.Random(seed), does it on the real broker
(pika, the management API), does it to the model, and checks what the
broker answered. Restarts (SIGTERM) and kills (SIGKILL) are steps too; after
each, tests/model/verify.py compares everything.

The same seed gives the same walk as long as the broker behaves as the model
says (after a kill, what the broker kept decides what comes next: the
reproduction is then likely, not certain)."""
import os
import random
import time

import pika

from tests.model import model as M
from tests.model.driver import Client, expect_channel_error
from tests.model.model import ModelError, body_for
from tests.model.verify import Verifier

# the broker keeps a requeued message's redelivered flag and x-delivery-count
# across a clean restart (issue 40; main's 2edfb2e). LAVINMQ_MODEL_CHECK_FLAGS=0
# (for a broker from before it): the walk adopts what the broker shows after
# a restart and counts the differences instead
CHECK_FLAGS = os.environ.get("LAVINMQ_MODEL_CHECK_FLAGS", "1") == "1"

WEIGHTS = {
    "declare_queue": 8, "delete_queue": 3, "redeclare_mismatch": 1, "purge": 2,
    "declare_exchange": 5, "delete_exchange": 2, "bind_queue": 6, "unbind_queue": 2,
    "bind_exchange": 3, "unbind_exchange": 1, "publish": 20, "get": 9, "consume": 5,
    "read_stream": 2, "hold": 2, "release": 2, "set_policy": 2, "clear_policy": 1,
    "check_definitions": 1, "bad_bind": 1, "recreate_queue": 2, "recreate_exchange": 1,
}


class Walk:
    def __init__(self, target, seed, steps, restart_every=12, kill_share=0.5, strict=True,
                 check_flags=CHECK_FLAGS):
        self.target = target
        self.seed = seed
        self.steps = steps
        self.restart_every = restart_every
        self.kill_share = kill_share
        self.strict = strict
        self.check_flags = check_flags
        self.rng = random.Random(seed)
        self.model = M.Model()
        self.client = Client(target)
        self.verifier = Verifier(self)
        self.stats = {"steps": 0, "restarts": 0, "kills": 0, "published": 0, "lost": 0, "resurrected": 0,
                      "definition mismatches": 0}
        self.anomalies = []
        self.held = []          # (QueueState, Entry, delivery tag) the holder channel keeps unacked
        self.trace = []
        self.step = 0

    # -- running ----------------------------------------------------------------------------

    def run(self):
        t0 = time.monotonic()
        self.client.connect()
        ops = sorted(WEIGHTS)
        weights = [WEIGHTS[o] for o in ops]
        try:
            for self.step in range(1, self.steps + 1):
                if self.rng.random() < 1 / self.restart_every:
                    if self.rng.random() < self.kill_share:
                        self.do(self.op_kill)
                    else:
                        self.do(self.op_restart)
                else:
                    for _ in range(20):     # an operation with nothing to work on: another
                        if self.do(getattr(self, "op_" + self.rng.choices(ops, weights)[0])):
                            break
                self.stats["steps"] = self.step
            self.step += 1
            self.do(self.op_restart)        # the walk ends with a clean restart's checks
        finally:
            self.client.close()
        if self.anomalies:
            self.save_trace()
        self.stats["seconds"] = round(time.monotonic() - t0, 1)
        return self.stats

    def do(self, op):
        try:
            text = op()
        except ModelError as e:
            raise ModelError(self.failure(str(e))) from None
        except (pika.exceptions.AMQPError, OSError) as e:
            raise ModelError(self.failure(f"{type(e).__name__}: {e}")) from None
        if text:
            self.trace.append(f"{self.step}: {text}")
        problems = self.target.problems()
        if problems:
            raise ModelError(self.failure(problems))
        return text

    def save_trace(self):
        """Every step into LAVINMQ_MODEL_TRACE_FILE, if set (a long walk's)."""
        path = os.environ.get("LAVINMQ_MODEL_TRACE_FILE")
        if path:
            with open(path, "w") as f:
                f.write("\n".join(self.trace) + "\n")

    def failure(self, text):
        recent = "\n".join(self.trace[-40:])
        self.save_trace()
        return (f"{text}\n\nseed {self.seed}, step {self.step} on {self.target.name}; reproduce with "
                f"LAVINMQ_MODEL_SEED={self.seed} LAVINMQ_MODEL_STEPS={self.steps} "
                f"LAVINMQ_MODEL_RESTART_EVERY={self.restart_every}"
                f"{'' if self.check_flags else ' LAVINMQ_MODEL_CHECK_FLAGS=0'} "
                f"pytest {self.target.reproduce} -s\nthe last steps:\n{recent}\n"
                f"stats so far: {self.stats}\nthe broker's log:\n{self.target.log_tail()}")

    def summary(self):
        self.stats.update(self.target.notes())
        keys = ["steps", "restarts", "kills", "published", "lost", "resurrected", "definition mismatches"]
        parts = [f"{k} {self.stats.get(k, 0)}" for k in keys]
        parts += [f"{k} {v}" for k, v in sorted(self.stats.items()) if k not in keys]
        return f"seed {self.seed} on {self.target.name}: " + ", ".join(parts)

    # -- picking ------------------------------------------------------------------------------

    def pick(self, seq):
        seq = sorted(seq)
        return self.rng.choice(seq) if seq else None

    def classic_queues(self, nonempty=False):
        return [n for n, q in self.model.queues.items()
                if q.d.kind != "stream" and (q.ready or not nonempty)]

    def props(self, m):
        return pika.BasicProperties(delivery_mode=2, message_id=str(m.seq), priority=m.priority,
                                    headers=m.headers)

    # -- queues -------------------------------------------------------------------------------

    def op_declare_queue(self, name=None):
        name = name or self.rng.choice(M.QUEUE_NAMES + M.STREAM_NAMES)
        q = self.model.queues.get(name)
        if q is None:
            if name in M.STREAM_NAMES:
                d = M.QueueDef(name, "stream", True, small_segments=self.rng.random() < 0.5)
            else:
                kind = self.rng.choice(("classic", "classic", "priority", "limited"))
                d = M.QueueDef(name, kind, self.rng.random() < 0.75, limit=self.rng.choice((0, 1, 2)),
                               max_priority=self.rng.choice((3, 5)))
            q = M.QueueState(d)
            self.model.queues[name] = q
            what = "declare"
        else:
            what = "redeclare"
        d = q.d
        count = self.client.channel().queue_declare(name, durable=d.durable, arguments=d.arguments)
        count = count.method.message_count
        want = len(q.stream) if d.kind == "stream" else len(q.ready)
        if count != want:
            raise ModelError(f"{what} {d.describe()}: declare-ok says {count} messages, the model {want}")
        return f"{what} queue {d.describe()}"

    def op_recreate_queue(self):
        """Deleted and declared again at once (of its kind or another): what
        boot's replay of the definitions log must not confuse."""
        name = self.pick(self.model.queues)
        if name is None:
            return None
        first = self.op_delete_queue(name)
        return f"{first}; {self.op_declare_queue(name)}"

    def op_recreate_exchange(self):
        name = self.pick(self.model.exchanges)
        if name is None:
            return None
        first = self.op_delete_exchange(name)
        return f"{first}; {self.op_declare_exchange(name)}"

    def op_redeclare_mismatch(self):
        name = self.pick(self.model.queues)
        if name is None:
            return None
        d = self.model.queues[name].d
        ch = self.client.channel()
        expect_channel_error(lambda: ch.queue_declare(name, durable=not d.durable, arguments=d.arguments), 406)
        return f"redeclare {name} with durable={not d.durable}: 406"

    def op_delete_queue(self, name=None):
        name = name or self.rng.choice(M.QUEUE_NAMES + M.STREAM_NAMES)
        count = self.client.channel().queue_delete(name).method.message_count
        q = self.model.queues.get(name)
        if q is None:
            return f"delete queue {name} (none)"
        want = len(q.stream) if q.d.kind == "stream" else len(q.ready)
        self.model.remove_queue(name)
        if count != want:
            raise ModelError(f"delete {q.d.describe()}: delete-ok says {count} messages, the model {want}")
        return f"delete queue {q.d.describe()} ({count} messages)"

    def op_purge(self, name=None):
        name = name or self.pick(self.model.queues)
        if name is None:
            return None
        q = self.model.queues[name]
        count = self.client.channel().queue_purge(name).method.message_count
        if q.d.kind == "stream":
            if count > len(q.stream):
                raise ModelError(f"purge {q.d.describe()}: {count} purged of the {len(q.stream)} it holds")
            del q.stream[:count]        # whole sealed segments: the oldest
        else:
            if count != len(q.ready):
                raise ModelError(f"purge {q.d.describe()}: purge-ok says {count}, the model {len(q.ready)}")
            for e in q.ready:
                q.gone[e.seq] = (e, "purged")
            q.ready = []
        return f"purge {name} ({count})"

    # -- exchanges and bindings ---------------------------------------------------------------

    def op_declare_exchange(self, name=None):
        name = name or self.rng.choice(M.EXCHANGE_NAMES)
        xs = self.model.exchanges.get(name)
        what = "redeclare"
        if xs is None:
            kinds = ["direct", "topic", "fanout", "delayed"]
            if not any(x.d.kind == "persistent" for x in self.model.exchanges.values()):
                kinds.append("persistent")      # one at a time: whose x-offset a copy carries stays plain
            d = M.ExchangeDef(name, self.rng.choice(kinds), self.rng.random() < 0.75, keep=self.rng.choice((3, 6)))
            xs = M.ExchangeState(d)
            self.model.exchanges[name] = xs
            what = "declare"
        d = xs.d
        self.client.channel().exchange_declare(name, d.declare_type, durable=d.durable,
                                               arguments=d.declare_arguments)
        return f"{what} exchange {d.describe()}"

    def op_delete_exchange(self, name=None):
        name = name or self.rng.choice(M.EXCHANGE_NAMES)
        self.client.channel().exchange_delete(name)
        if name in self.model.exchanges:
            self.model.remove_exchange(name)
        return f"delete exchange {name}"

    def op_bind_queue(self):
        ex, qn = self.pick(self.model.exchanges), self.pick(self.model.queues)
        if ex is None or qn is None:
            return None
        xs = self.model.exchanges[ex]
        key = self.rng.choice(M.BINDING_KEYS[xs.d.type])
        args = {}
        if xs.d.kind == "persistent" and self.rng.random() < 0.4:
            args = self.rng.choice(({"x-from": 0}, {"x-tail": 2}))
        b = (ex, "queue", qn, key, tuple(sorted(args.items())))
        self.client.channel().queue_bind(qn, ex, key, arguments=args)
        if b not in self.model.bindings:
            if args:
                self.model.replay_to(ex, qn, key, args)
            self.model.bindings.add(b)
        return f"bind queue {qn} to {ex} '{key}' {args or ''}"

    def op_unbind_queue(self):
        b = self.pick(b for b in self.model.bindings if b[1] == "queue")
        if b is None:
            return None
        self.client.channel().queue_unbind(b[2], b[0], b[3], arguments=dict(b[4]))
        self.model.bindings.discard(b)
        return f"unbind queue {b}"

    def op_bind_exchange(self):
        src = self.pick(self.model.exchanges)
        dst = self.pick(n for n, x in self.model.exchanges.items() if x.d.kind != "delayed")
        if src is None or dst is None:
            return None
        key = self.rng.choice(M.BINDING_KEYS[self.model.exchanges[src].d.type])
        self.client.channel().exchange_bind(dst, src, key)
        self.model.bindings.add((src, "exchange", dst, key, ()))
        return f"bind exchange {dst} to {src} '{key}'"

    def op_unbind_exchange(self):
        b = self.pick(b for b in self.model.bindings if b[1] == "exchange")
        if b is None:
            return None
        self.client.channel().exchange_unbind(b[2], b[0], b[3])
        self.model.bindings.discard(b)
        return f"unbind exchange {b}"

    def op_bad_bind(self):
        """Bindings the broker must refuse: to a queue that does not exist
        (404); a replay binding between exchanges (406)."""
        ch = self.client.channel()
        ex = self.pick(self.model.exchanges)
        missing = [n for n in M.QUEUE_NAMES if n not in self.model.queues]
        px = self.pick(n for n, x in self.model.exchanges.items() if x.d.kind == "persistent")
        if px is not None and self.rng.random() < 0.5:
            expect_channel_error(lambda: ch.exchange_bind(ex, px, "#", arguments={"x-from": 0}), 406)
            return f"bind {ex} to {px} with x-from: 406"
        if ex is None or not missing:
            return None
        expect_channel_error(lambda: ch.queue_bind(missing[0], ex, "a"), 404)
        return f"bind missing queue {missing[0]} to {ex}: 404"

    # -- policies -----------------------------------------------------------------------------

    def op_set_policy(self):
        name = self.rng.choice(M.POLICY_NAMES)
        pattern = self.rng.choice(M.POLICY_PATTERNS)
        max_len = self.rng.choice((1, 2, 3, 5, 8))
        self.client.api("PUT", f"/api/policies/%2F/{name}",
                        {"pattern": pattern, "definition": {"max-length": max_len}, "apply-to": "queues",
                         "priority": M.POLICY_NAMES.index(name)})
        self.model.policies[name] = (pattern, max_len)
        for q in self.model.queues.values():
            self.model.enforce_max_length(q)
        return f"policy {name} '{pattern}' max-length {max_len}"

    def op_clear_policy(self):
        name = self.pick(self.model.policies)
        if name is None:
            return None
        self.client.api("DELETE", f"/api/policies/%2F/{name}")
        del self.model.policies[name]
        for q in self.model.queues.values():
            self.model.enforce_max_length(q)
        return f"clear policy {name}"

    def op_check_definitions(self):
        self.verifier.check_definitions(counts=True)
        return "check definitions"

    # -- publishing ---------------------------------------------------------------------------

    def op_publish(self):
        if self.model.exchanges and self.rng.random() < 0.55:
            ex = self.pick(self.model.exchanges)
            # mostly a key some binding of it takes, so that messages go places
            keys = [b[3] for b in self.model.bindings if b[0] == ex and b[3] in M.ROUTING_KEYS]
            rk = self.rng.choice(keys if keys and self.rng.random() < 0.7 else M.ROUTING_KEYS)
        else:
            names = list(self.model.queues) if self.rng.random() < 0.85 else []
            ex, rk = "", self.pick(names) or self.rng.choice(M.QUEUE_NAMES + M.STREAM_NAMES)
        xs = self.model.exchanges.get(ex)
        n = self.rng.randint(1, 5)
        pub = self.client.publisher()
        notes = []
        for _ in range(n):
            headers = {"n": self.model.next_seq + 1}
            delay = None
            if xs is not None and xs.d.kind == "delayed":
                delay = self.rng.choice((None, 0, 10, 25, M.LONG_DELAY))
                if delay is not None:
                    headers["x-delay"] = delay
            m = self.model.new_msg(self.rng.choice((None, 0, 1, 3, 5, 9)), headers, rk)
            pub.basic_publish(ex, rk, body_for(m.seq), self.props(m))
            self.stats["published"] += 1
            if delay == M.LONG_DELAY:
                xs.held.append(m.seq)
                notes.append(f"{m.seq}:held")
            elif delay:
                self.wait_delayed(ex, len(xs.held))
                notes.append(f"{m.seq}:{delay}ms->{','.join(self.model.deliver_routed(m, ex, rk)) or '-'}")
            else:
                notes.append(f"{m.seq}->{','.join(self.model.deliver_routed(m, ex, rk)) or '-'}")
        return f"publish to '{ex}' '{rk}': {' '.join(notes)}"

    def wait_delayed(self, ex, held, timeout=10):
        """Until the exchange's delay queue holds only the long-held ones
        again: the short one has been routed."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.client.api("GET", f"/api/queues/%2F/amq.delayed.{ex}")["messages"]
            if n == held:
                return
            if time.monotonic() > deadline:
                raise ModelError(f"delayed exchange {ex}: {n} held after {timeout} s, the model says {held}")
            time.sleep(0.005)

    # -- consuming ----------------------------------------------------------------------------

    def check_taken(self, q, method, props, body, no_ack, where):
        """A delivery from q: the model's head. -> its Entry."""
        if method is None:
            raise ModelError(f"{where}: nothing delivered from {q.d.describe()}; the model holds "
                             f"{[e.seq for e in q.ready]}")
        e, count = self.model.take(q, no_ack)
        seq = self.verifier.seq_of(props, where)
        if seq != e.seq:
            raise ModelError(f"{where}: {q.d.describe()} delivered message {seq}, the model's head is {e.seq} "
                             f"(it holds {[e.seq] + [x.seq for x in q.ready]})")
        self.verifier.check_message(seq, props, body, e.stamp, where)
        got_count = (props.headers or {}).get("x-delivery-count")
        if method.redelivered != e.redelivered or got_count != count:
            raise ModelError(f"{where}: message {seq} from {q.d.describe()}: redelivered={method.redelivered} "
                             f"x-delivery-count={got_count}; the model says {e.redelivered} / {count}")
        return e

    def settle_all(self, ch, q, taken):
        """Ack, reject or nack the deliveries, in a random order; -> notes."""
        notes = []
        if taken and self.rng.random() < 0.15:
            how = self.rng.choice(("ack", "requeue"))
            last = max(t for t, _ in taken)
            if how == "ack":
                ch.basic_ack(last, multiple=True)
            else:
                ch.basic_nack(last, multiple=True, requeue=True)
            for _, e in taken:
                self.model.settle(q, e, how)
            return [f"all {how}"]
        for tag, e in self.rng.sample(taken, len(taken)):
            how = self.rng.choice(("ack", "ack", "nack-requeue", "reject-requeue", "nack-drop", "reject-drop"))
            if how == "ack":
                ch.basic_ack(tag)
            elif how.startswith("nack"):
                ch.basic_nack(tag, requeue=how.endswith("requeue"))
            else:
                ch.basic_reject(tag, requeue=how.endswith("requeue"))
            self.model.settle(q, e, "ack" if how == "ack" else "requeue" if how.endswith("requeue") else "rejected")
            notes.append(f"{e.seq}:{how}")
        return notes

    def sync_count(self, ch, q, where):
        """A round trip on the channel (its acks are done) and the count."""
        n = ch.queue_declare(q.d.name, passive=True).method.message_count
        if n != len(q.ready):
            raise ModelError(f"{where}: {q.d.describe()} has {n} ready, the model says "
                             f"{len(q.ready)}: {[e.seq for e in q.ready]}")

    def op_get(self):
        name = self.pick(self.classic_queues(nonempty=self.rng.random() < 0.9))
        if name is None:
            return None
        q = self.model.queues[name]
        ch = self.client.channel()
        no_ack = self.rng.random() < 0.15
        taken, got = [], []
        for _ in range(self.rng.randint(1, 4)):
            method, props, body = ch.basic_get(name, auto_ack=no_ack)
            if not q.ready:
                if method is not None:
                    raise ModelError(f"get: {q.d.describe()} delivered {props.message_id}; the model holds nothing")
                got.append("empty")
                break
            e = self.check_taken(q, method, props, body, no_ack, "get")
            if method.message_count != len(q.ready):
                raise ModelError(f"get: get-ok says {method.message_count} left, the model {len(q.ready)}")
            got.append(str(e.seq))
            if no_ack:
                q.gone[e.seq] = (e, "auto-ack")
            else:
                taken.append((method.delivery_tag, e))
        notes = self.settle_all(ch, q, taken)
        self.sync_count(ch, q, "get")
        return f"get {name}{' no-ack' if no_ack else ''}: {' '.join(got)} {' '.join(notes)}"

    def op_consume(self):
        name = self.pick(self.classic_queues(nonempty=True))
        if name is None:
            return None
        q = self.model.queues[name]
        k = min(self.rng.randint(1, 5), len(q.ready))
        got, ch = self.verifier.consume_all(name, k, prefetch=k, timeout=10)
        if len(got) != k:
            raise ModelError(f"consume: {len(got)} of {k} delivered from {q.d.describe()} in 10 s")
        taken = [(method.delivery_tag, self.check_taken(q, method, props, body, False, "consume"))
                 for method, props, body in got]
        notes = self.settle_all(ch, q, taken)
        self.sync_count(ch, q, "consume")
        ch.close()
        return f"consume {name}: {' '.join(str(e.seq) for _, e in taken)} {' '.join(notes)}"

    def op_read_stream(self):
        name = self.pick(n for n, q in self.model.queues.items() if q.d.kind == "stream" and q.stream)
        if name is None:
            return None
        q = self.model.queues[name]
        start = self.rng.randrange(len(q.stream))
        want = q.stream[start:start + self.rng.randint(1, 8)]
        spec = "first" if start == 0 and self.rng.random() < 0.5 else want[0][0]
        got, ch = self.verifier.consume_all(name, len(want), arguments={"x-stream-offset": spec},
                                            prefetch=10, timeout=10)
        if got:
            ch.basic_ack(delivery_tag=0, multiple=True)
        ch.close()
        got = got[:len(want)]       # a prefetch may bring more
        seen = [((p.headers or {}).get("x-stream-offset"), self.verifier.seq_of(p, "stream")) for _, p, _ in got]
        if seen != [(o, s) for o, s, _ in want]:
            raise ModelError(f"read {q.d.describe()} from {spec}: got {seen}, the model says "
                             f"{[(o, s) for o, s, _ in want]}")
        for (_, p, body), (_, seq, stamp) in zip(got, want):
            self.verifier.check_message(seq, p, body, stamp, f"stream {name}")
        return f"read stream {name} from {spec}: {len(seen)}"

    def op_hold(self):
        """Messages taken and kept unacked by the holder channel, across
        the next steps (restarts and kills too)."""
        name = self.pick(self.classic_queues(nonempty=True))
        if name is None:
            return None
        q = self.model.queues[name]
        ch = self.client.holding()
        seqs = []
        for _ in range(min(self.rng.randint(1, 3), len(q.ready))):
            method, props, body = ch.basic_get(name)
            e = self.check_taken(q, method, props, body, False, "hold")
            q.unacked[e.seq] = e
            self.held.append((q, e, method.delivery_tag))
            seqs.append(e.seq)
        return f"hold {name}: {seqs}"

    def op_release(self):
        if not self.held:
            return None
        ch = self.client.holding()
        how = self.rng.choice(("close", "ack", "reject"))
        live = [(q, e, tag) for q, e, tag in self.held if self.model.queues.get(q.d.name) is q]
        if how == "close":
            ch.close()          # the broker requeues what the channel held
        elif how == "ack":
            ch.basic_ack(0, multiple=True)
            ch.basic_qos(prefetch_count=0)      # a round trip: the acks are done
        else:
            for _, _, tag in live:
                ch.basic_reject(tag, requeue=True)
            ch.basic_qos(prefetch_count=0)
        for q, e, _ in live:
            q.unacked.pop(e.seq, None)
            self.model.settle(q, e, "ack" if how == "ack" else "requeue")
        seqs = [e.seq for _, e, _ in self.held]
        self.held = []
        return f"release held {seqs} by {how}"

    # -- restarts -----------------------------------------------------------------------------

    # while the holder channel keeps messages the client stays connected: the
    # broker's own way out handles them (a clean stop closes the connection,
    # which requeues). Otherwise it leaves first: a clean stop waits a second
    # for a connected client's close-ok, which it does not read (lavinmq.server)

    def op_restart(self):
        if not self.held:
            self.client.close()
        self.target.clean_restart(self.client.pump, self.settle_in_grace if self.held else None)
        self.stats["restarts"] += 1
        self.after(clean=True)
        return "restart (SIGTERM)"

    def op_kill(self):
        # half the kills come right after acks that had no round trip (the
        # broker may not have read them, or not written them): those
        # messages may come back. Some others right after a purge, which
        # must not undo itself. The choices have rngs of their own, so that
        # the walk's other steps stay those of the seed
        side = random.Random(f"{self.seed}-{self.step}")
        name = side.choice(sorted(self.classic_queues(nonempty=True)) or [None])
        before = ""
        if name is not None and side.random() < 0.5:
            q = self.model.queues[name]
            ch = self.client.channel()
            acked = []
            for _ in range(min(3, len(q.ready))):
                method, props, body = ch.basic_get(name)
                e = self.check_taken(q, method, props, body, False, "get before a kill")
                ch.basic_ack(method.delivery_tag)
                self.model.settle(q, e, "ack")
                acked.append(e.seq)
            before = f" just after acking {name} {acked}"
        elif name is not None and random.Random(f"{self.seed}-{self.step}-purge").random() < 0.4:
            before = f" just after a {self.op_purge(name)}"
        self.target.kill_restart()
        self.stats["kills"] += 1
        self.after(clean=False)
        return f"kill (SIGKILL){before} and start"

    def settle_in_grace(self):
        """SIGTERM sent: the holder acks or requeues some of what it keeps,
        which the broker takes in its grace period; the rest it requeues
        when it closes the connection (lavinmq/drain.py)."""
        ch = self.client.holding()
        notes = []
        for q, e, tag in list(self.held):
            how = self.rng.choice(("ack", "requeue", "keep"))
            if how == "keep":
                continue
            if how == "ack":
                ch.basic_ack(tag)
            else:
                ch.basic_reject(tag, requeue=True)
            self.held.remove((q, e, tag))
            if self.model.queues.get(q.d.name) is q:
                q.unacked.pop(e.seq, None)
                self.model.settle(q, e, how)
            notes.append(f"{e.seq}:{how}")
        self.trace.append(f"{self.step}: in the grace period: {' '.join(notes) or 'nothing settled'}")

    def after(self, clean):
        self.client.close()
        self.held = []
        self.model.restarted(clean, self.check_flags)
        self.client.connect()
        self.verifier.after_restart(clean)
