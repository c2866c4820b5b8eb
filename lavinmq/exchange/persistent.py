"""Persistent exchanges, as AvalancheMQ had them: `x-persist-messages` (how
many to keep) and `x-persist-ms` (for how long) on an exchange of any type
keep every message it receives, bound or not, in a store of its own
(`_core/exchange_store.pyx` over the stream store: segments, offsets,
retention), in the vhost's directory as a queue's is. Each kept message
carries an `x-offset` header with its offset, also in the copies the
exchange's queues get.

A queue binding with `x-head` (the N oldest; negative: all but the N
newest), `x-tail` (the N newest; negative: all but the N oldest) or `x-from`
(from that offset; 0 or one not held: everything) is first given the
stored messages it matches (`_core/replay.pyx`), in batches spread over the
event loop, then what was published since it was made; only then does it
route, so that the queue gets everything in order. Its bind-ok waits for
that. A binding without them gets only new messages, as before."""
import asyncio
import logging

from lavinmq._core.exchange_store import ExchangeStore
from lavinmq._core.replay import Replay
from lavinmq._core.segment import entity_dir
from lavinmq._core.stream_store import StreamStore
from lavinmq.errors import PreconditionFailed

log = logging.getLogger("lavinmq.exchange")

PERSIST_ARGS = ("x-persist-messages", "x-persist-ms")
REPLAY_ARGS = ("x-head", "x-tail", "x-from")
# the store is named as AvalancheMQ named the queue it kept them in
STORE_PREFIX = "amq.persistent."
# what one loop callback copies at most
BATCH_MESSAGES = 4096
BATCH_BYTES = 8 * 1024 * 1024


def _limit(value):
    # checked at declare (lavinmq.arguments); what an older definition
    # holds is taken as leniently as AvalancheMQ did: <= 0 is no limit
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def settings(arguments):
    """-> (messages, ms) to keep, 0 = no limit by that measure, when the
    arguments make the exchange persistent (either key present), else None."""
    arguments = arguments or {}
    if not any(k in arguments for k in PERSIST_ARGS):
        return None
    return _limit(arguments.get("x-persist-messages")), _limit(arguments.get("x-persist-ms"))


def store_name(exchange_name):
    return STORE_PREFIX + exchange_name


def attach(vhost, ex):
    """Open (or load) the exchange's store when its arguments ask for one."""
    keep = settings(ex.arguments)
    if keep is None:
        return
    name = store_name(ex.name)
    parent = vhost.dir if ex.durable else vhost.transient_dir
    durable_syncer = vhost.syncer if ex.durable else None
    store = StreamStore(entity_dir(parent, name), vhost.segment_size,
                        f"'{name}' in vhost '{vhost.name}'", durable_syncer)
    if store.error is not None:
        # the exchange routes on; it keeps nothing until the store is mended
        log.error("exchange '%s' in vhost '%s': its stored messages cannot be opened: %s",
                  ex.name, vhost.name, store.error)
    ex.persist = ExchangeStore(store, *keep)


def detach(ex):
    """The exchange is deleted: so are its stored messages."""
    xs = ex.persist
    if xs is None:
        return
    ex.persist = None
    xs.store.destroy()


def stats(ex):
    """The management API's view of what the exchange holds, or None."""
    xs = ex.persist
    if xs is None:
        return None
    messages, size, first, last = xs.stats()
    return {"messages": messages, "bytes": size, "first_offset": first if messages else None,
            "last_offset": last if messages else None,
            "max_messages": xs.keep_messages or None, "max_ms": xs.keep_ms or None}


# -- replay to a new binding ------------------------------------------------------


def replay_request(arguments):
    """-> (key, value) of the binding's x-head, x-tail or x-from, or None.
    lavinmq.arguments has checked that there is at most one, an integer."""
    for key in REPLAY_ARGS:
        value = (arguments or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return key, value
    return None


def select(xs, key, value):
    """-> (first, last) offsets of the stored messages the request picks
    (first > last: none), and the offset after the newest."""
    lo, hi = xs.window()
    count = hi - lo + 1 if lo <= hi else 0
    if key == "x-head":
        first, last = (lo, lo + min(value, count) - 1) if value >= 0 else (lo, hi + value)
    elif key == "x-tail":
        first, last = (hi - min(value, count) + 1, hi) if value >= 0 else (lo - value, hi)
    else:
        first, last = (value if lo <= value <= hi else lo), hi
    if count == 0 or first > last or last < lo or first > hi:
        first, last = 1, 0
    return first, last, hi + 1


def refuse_exchange_replay(src, arguments):
    """Replays go into queues: an exchange-to-exchange binding with x-head,
    x-tail or x-from from a persistent exchange is refused (AvalancheMQ did
    not do it either)."""
    if src.persist is not None and replay_request(arguments) is not None:
        raise PreconditionFailed(f"exchange '{src.name}' replays its stored messages (x-head, x-tail, "
                                 f"x-from) into queues only: bind a queue", 40, 30)


def bind_with_replay(vhost, ex, queue, routing_key, arguments):
    """A queue binding that asks for stored messages. -> its ReplayJob (done
    already when the copy took one batch), or None when nothing was copied
    (the binding existed already: nothing is copied twice)."""
    if ex.persist.store.closed:
        # its store could not be opened: nothing to copy
        ex.bind(queue, routing_key, arguments)
        return None
    held = ex.bind_held(queue, routing_key, arguments)
    if held is None:
        return None
    binding, matcher = held
    key, value = replay_request(arguments)
    first, last, tail_from = select(ex.persist, key, value)
    job = ReplayJob(ex, binding, Replay(ex.persist, matcher, queue, first, last, tail_from))
    ex.set_replay(binding, job)
    if job.step():
        return job
    log.info("exchange '%s' in vhost '%s': replaying stored messages %d..%d to queue '%s'",
             ex.name, vhost.name, first, last, queue.name)
    return job


class ReplayJob:
    """Drives a Replay one batch per loop callback; when it has caught up
    with the store the binding is released to route."""

    def __init__(self, ex, binding, replay):
        self.ex = ex
        self.binding = binding
        self.replay = replay
        self.done = False
        self.cancelled = False
        self.waiters = []

    def step(self):
        """One batch. -> True when finished (or stopped)."""
        if self.done:
            return True
        try:
            caught_up = self.replay.run(BATCH_MESSAGES, BATCH_BYTES)
        except Exception:
            # what could be copied was: the binding routes from here on
            log.exception("exchange '%s': replay to queue '%s' stopped", self.ex.name,
                          self.binding.destination.name)
            caught_up = True
        if caught_up:
            self.ex.release_held(self.binding)
            self._finish()
            return True
        asyncio.get_running_loop().call_soon(self.step)
        return False

    def cancel(self):
        """The binding went before the replay finished."""
        self.cancelled = True
        self._finish()

    def _finish(self):
        if self.done:
            return
        self.done = True
        waiters, self.waiters = self.waiters, []
        for callback in waiters:
            try:
                callback()
            except Exception:
                log.exception("after-replay callback failed")

    def when_done(self, callback):
        if self.done:
            callback()
        else:
            self.waiters.append(callback)

    @property
    def copied(self):
        return self.replay.copied
