"""What the model test checks against the broker: the definitions the
management API lists, and every message of every queue after a restart.

Strict (the CI seeds): the first divergence raises ModelError. Lenient (the
long run): each divergence is counted and described, and the broker and the
model are brought back in step (what the model lacks is deleted from the
broker, what the broker lacks is dropped from the model) so that the walk
goes on and the summary counts everything it met."""
import time

from tests.model.model import ModelError, body_for

# what a SIGKILL may undo: the broker confirms publishes, not acks or drops
TOLERATED_AFTER_KILL = {"ack", "auto-ack", "rejected", "max-length", "max-length at boot", "delivery-limit"}


def freeze_args(args):
    return tuple(sorted((args or {}).items()))


class Verifier:
    def __init__(self, walk):
        self.walk = walk

    @property
    def model(self):
        return self.walk.model

    @property
    def client(self):
        return self.walk.client

    def problem(self, kind, text, count=1):
        """A divergence: raised (strict) or counted (lenient)."""
        self.walk.stats[kind] = self.walk.stats.get(kind, 0) + count
        if self.walk.strict:
            raise ModelError(f"{kind}: {text}")
        self.walk.anomalies.append((self.walk.step, kind, text))
        self.walk.trace.append(f"{self.walk.step}: ({kind}: {text[:200]}; repaired)")

    # -- a delivered message against what the model says -----------------------------------

    def check_message(self, m_seq, props, body, stamp, where):
        m = self.model.msgs.get(m_seq)
        if m is None:
            raise ModelError(f"{where}: message {m_seq} was never published")
        if body != body_for(m_seq):
            raise ModelError(f"{where}: message {m_seq}: body differs ({len(body)} bytes, "
                             f"{len(body_for(m_seq))} sent)")
        headers = dict(props.headers or {})
        headers.pop("x-delivery-count", None)
        headers.pop("x-stream-offset", None)
        want = dict(m.headers)
        if stamp is not None:
            want["x-offset"] = stamp
        if headers != want or props.delivery_mode != 2 or props.priority != m.priority:
            raise ModelError(f"{where}: message {m_seq}: headers {headers} delivery_mode {props.delivery_mode} "
                             f"priority {props.priority}; sent {want}, 2, {m.priority}")

    @staticmethod
    def seq_of(props, where):
        try:
            return int(props.message_id)
        except (TypeError, ValueError):
            raise ModelError(f"{where}: a message without our message_id: {props}") from None

    # -- definitions ----------------------------------------------------------------------

    def check_definitions(self, counts):
        """The API's queues, exchanges, bindings and policies against the
        model (message counts too when counts)."""
        want_q, want_x, want_b, want_p = self.model.expected_definitions()
        api = self.client.api
        got_q = {q["name"]: {"durable": q["durable"], "arguments": q["arguments"], "type": q.get("type"),
                             "policy": q.get("policy"), "messages": q.get("messages")}
                 for q in api("GET", "/api/queues/%2F")}
        got_x = {x["name"]: {"type": x["type"], "durable": x["durable"], "arguments": x["arguments"]}
                 for x in api("GET", "/api/exchanges/%2F") if x["name"] and not x["name"].startswith("amq.")}
        got_b = {(b["source"], b["destination_type"], b["destination"], b["routing_key"],
                  freeze_args(b["arguments"])) for b in api("GET", "/api/bindings/%2F") if b["source"]}
        got_p = {p["name"]: {k: p.get(k) for k in ("pattern", "definition", "apply-to", "priority")}
                 for p in api("GET", "/api/policies/%2F")}
        if not counts:
            for d in list(want_q.values()) + list(got_q.values()):
                d.pop("messages", None)
        self._compare("queue", want_q, got_q, self._repair_queue)
        self._compare("exchange", want_x, got_x, self._repair_exchange)
        for b in sorted(want_b - got_b):
            self.problem("definition mismatches", f"binding {b} is missing")
            self.model.bindings.discard(b)
        for b in sorted(got_b - want_b):
            self.problem("definition mismatches", f"binding {b} should not exist")
            self._unbind(b)
        self._compare("policy", want_p, got_p, self._repair_policy)

    def _compare(self, what, want, got, repair):
        for name in sorted(set(want) | set(got)):
            w, g = want.get(name), got.get(name)
            if w == g:
                continue
            if g is None:
                text = f"{what} '{name}' {w} is missing"
            elif w is None:
                text = f"{what} '{name}' {g} should not exist"
            else:
                text = f"{what} '{name}' is {g}, the model says {w}"
            kind = "definition mismatches"
            if w is not None and g is not None and {k for k in w if w[k] != g.get(k)} == {"messages"}:
                kind = "count mismatches"
            self.problem(kind, text)
            repair(name, w, g)

    # lenient repairs: the broker and the model in step again

    def _repair_queue(self, name, want, got):
        m = self.model
        ex = name[len("amq.delayed."):] if name.startswith("amq.delayed.") else None
        if ex is not None and want is not None:
            # a delayed exchange's store: its count differs, or it is missing
            if got is not None:
                del m.exchanges[ex].held[got["messages"]:]      # which ones is unknowable
                return
            m.remove_exchange(ex)
            self.client.api("DELETE", f"/api/exchanges/%2F/{ex}", ok=(204, 404))
            return
        if got is not None:
            self.client.api("DELETE", f"/api/queues/%2F/{name}", ok=(204, 404))
        if name in m.queues:
            q = m.remove_queue(name, "repair")
            self.walk.stats["discarded in repairs"] = self.walk.stats.get("discarded in repairs", 0) + \
                len(q.ready) + len(q.stream)

    def _repair_exchange(self, name, want, got):
        if got is not None:
            self.client.api("DELETE", f"/api/exchanges/%2F/{name}", ok=(204, 404))
        if name in self.model.exchanges:
            self.model.remove_exchange(name)

    def _repair_policy(self, name, want, got):
        if got is not None:
            self.client.api("DELETE", f"/api/policies/%2F/{name}", ok=(204, 404))
        self.model.policies.pop(name, None)
        for q in self.model.queues.values():
            self.model.enforce_max_length(q)

    def _unbind(self, b):
        src, dtype, dst, key, args = b
        ch = self.client.channel()
        if dtype == "queue":
            ch.queue_unbind(dst, src, key, arguments=dict(args))
        else:
            ch.exchange_unbind(dst, src, key, arguments=dict(args))

    # -- messages after a restart ---------------------------------------------------------------

    def after_restart(self, clean):
        self.check_definitions(counts=False)
        for name in sorted(self.model.queues):
            q = self.model.queues.get(name)
            if q is None:
                continue
            if q.d.kind == "stream":
                self.verify_stream(q)
            else:
                self.verify_queue(q, clean)
        for name in sorted(self.model.exchanges):
            xs = self.model.exchanges.get(name)
            if xs is not None and xs.d.kind == "persistent":
                self.verify_kept(xs)
        self.check_definitions(counts=True)
        for q in self.model.queues.values():
            q.gone.clear()

    def consume_all(self, name, count, arguments=None, prefetch=0, timeout=20):
        """Up to count deliveries from a consumer; -> [(method, props, body)]
        and the channel (the deliveries still unacked)."""
        ch = self.client.fresh_channel()
        ch.basic_qos(prefetch_count=prefetch)
        got = []
        if count == 0:
            return got, ch
        tag = ch.basic_consume(name, lambda _c, m, p, b: got.append((m, p, b)), arguments=arguments)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            self.client.conn.process_data_events(time_limit=0.05)
        ch.basic_cancel(tag)
        return got, ch

    def verify_queue(self, q, clean):
        """Everything the queue holds, once, in delivery order: each
        message is taken by a consumer and requeued (which the model
        counts as a delivery and a requeue)."""
        m, name, where = self.model, q.d.name, f"queue {q.d.describe()}"
        count = self.client.channel().queue_declare(name, passive=True).method.message_count
        got, ch = self.consume_all(name, count)
        if len(got) < count:
            raise ModelError(f"{where}: {count} messages ready but only {len(got)} delivered in 20 s")
        cands = {e.seq: e for e in q.ready}
        back = {} if clean else {s: g for s, g in q.gone.items() if g[1] in TOLERATED_AFTER_KILL}
        actual, bad = [], False
        for method, props, body in got:
            seq = self.seq_of(props, where)
            if seq in cands:
                e = cands.pop(seq)
            elif seq in back:
                e, cause = back.pop(seq)
                e.flags_known = False
                self.walk.stats["resurrected"] = self.walk.stats.get("resurrected", 0) + 1
                key = f"resurrected ({cause})"
                self.walk.stats[key] = self.walk.stats.get(key, 0) + 1
                q.gone.pop(seq, None)
            else:
                gone = q.gone.get(seq)
                cause = gone[1] if gone else m.deleted.get((name, seq), "never routed to this queue")
                self.problem("came back", f"{where}: message {seq} came back after a "
                             f"{'clean restart' if clean else 'kill'} ({cause})")
                bad = True
                continue
            self.check_message(seq, props, body, e.stamp, where)
            actual.append((e, method, props))
        keys = [q.key(e) for e, _, _ in actual]
        if keys != sorted(keys):
            self.problem("order", f"{where}: delivered in the order {[e.seq for e, _, _ in actual]}, "
                         f"the model's order is {[e.seq for e in sorted((a[0] for a in actual), key=q.key)]}")
            bad = True
        missing = list(cands.values())
        if missing:
            _, max_len = m.policy_for(name)
            first = q.key(actual[0][0]) if actual else None
            if (not clean and max_len is not None and len(actual) == max_len
                    and all(q.key(e) < first for e in missing)):
                # resurrected messages made the queue longer than its
                # max-length at boot: the head went, as it should
                self.walk.stats["dropped at boot (max-length)"] = \
                    self.walk.stats.get("dropped at boot (max-length)", 0) + len(missing)
            else:
                self.problem("lost", f"{where}: confirmed messages {sorted(e.seq for e in missing)} are gone after "
                             f"a {'clean restart' if clean else 'kill'}; it held {[e.seq for e, _, _ in actual]}",
                             len(missing))
            for e in missing:
                m.deleted[(name, e.seq)] = "lost"
        self._adopt_flags(q, actual, clean, where)
        # the consumer's deliveries go back: a requeue of each
        ch.basic_nack(delivery_tag=0, multiple=True, requeue=True)
        q.ready = []
        for e, _, _ in actual:
            if q.d.kind == "limited":
                e.deliveries += 1
            m.settle(q, e, "requeue")
        if bad:     # lenient: start the queue over
            ch.queue_purge(name)
            for e in q.ready:
                m.deleted[(name, e.seq)] = "purged in a repair"
            q.ready = []
        left = ch.queue_declare(name, passive=True).method.message_count
        ch.close()
        if left != len(q.ready):
            raise ModelError(f"{where}: {left} ready after the check, the model says {len(q.ready)}")

    def _adopt_flags(self, q, actual, clean, where):
        """redelivered and x-delivery-count: checked where the model knows
        them, adopted where it cannot (after a kill, for held messages, and
        after any restart until the broker keeps them: check_flags)."""
        for e, method, props in actual:
            count = (props.headers or {}).get("x-delivery-count")
            want_count = e.deliveries if (q.d.kind == "limited" and e.deliveries > 0) else None
            if e.flags_known:
                if method.redelivered != e.redelivered or count != want_count:
                    self.problem("flag mismatches", f"{where}: message {e.seq}: redelivered={method.redelivered} "
                                 f"x-delivery-count={count}, the model says {e.redelivered} / {want_count}")
            elif clean and (method.redelivered != e.redelivered or count != want_count):
                # not checked (check_flags is off): counted for the summary
                self.walk.stats["flags differ (unchecked)"] = self.walk.stats.get("flags differ (unchecked)", 0) + 1
            e.redelivered = method.redelivered
            e.deliveries = count or 0
            e.flags_known = True

    def verify_stream(self, q):
        where = f"stream {q.d.describe()}"
        want = q.stream
        got, ch = self.consume_all(q.d.name, len(want), arguments={"x-stream-offset": "first"}, prefetch=1000)
        if got:
            ch.basic_ack(delivery_tag=0, multiple=True)
        ch.close()
        seen = []
        for method, props, body in got:
            seq = self.seq_of(props, where)
            offset = (props.headers or {}).get("x-stream-offset")
            seen.append((offset, seq))
        if seen != [(o, s) for o, s, _ in want]:
            lost = len({s for _, s, _ in want} - {s for _, s in seen})
            if lost:
                self.walk.stats["lost"] = self.walk.stats.get("lost", 0) + lost
            self.problem("stream mismatches", f"{where}: holds (offset, message) {seen[:40]}, the model says "
                         f"{[(o, s) for o, s, _ in want][:40]}")
            self._repair_queue(q.d.name, None, {"messages": 0})
            return
        for (method, props, body), (_, seq, stamp) in zip(got, want):
            self.check_message(seq, props, body, stamp, where)

    def verify_kept(self, xs):
        """A persistent exchange: the API's count and offsets, and what a
        new binding with x-from: 0 replays."""
        name, where = xs.d.name, f"exchange {xs.d.describe()}"
        info = self.client.api("GET", f"/api/exchanges/%2F/{name}").get("persist") or {}
        want = {"messages": len(xs.kept), "first_offset": xs.kept[0][0] if xs.kept else None,
                "last_offset": xs.kept[-1][0] if xs.kept else None}
        got = {k: info.get(k) for k in want}
        ch = self.client.channel()
        tmp = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(tmp, name, "#", arguments={"x-from": 0})
        replayed = []
        while True:
            method, props, body = ch.basic_get(tmp, auto_ack=True)
            if method is None:
                break
            seq = self.seq_of(props, where)
            replayed.append(((props.headers or {}).get("x-offset"), seq))
            if seq in self.model.msgs:
                self.check_message(seq, props, body, replayed[-1][0], where)
        ch.queue_delete(tmp)
        if got != want or replayed != [(o, s) for o, s, _ in xs.kept]:
            self.problem("persistent exchange", f"{where}: the API says {got} and x-from 0 replays "
                         f"{replayed}; the model says {want}, {[(o, s) for o, s, _ in xs.kept]}")
            self._repair_exchange(name, None, got)
