"""The classic queue (and the priority queue, which differs only in its
store): the control half over `_core.queue.Queue`. Settings from arguments
and policies are resolved here, once per change, and handed to the core;
the queue's own expiry (x-expires) is a timer here."""
import asyncio
import logging
import os
import time

from lavinmq._core.queue import Queue as CoreQueue
from lavinmq.arguments import EMPTY, check_equivalent
from lavinmq.errors import PreconditionFailed
from lavinmq.clustering import changes

log = logging.getLogger("lavinmq.queue")


def log_name(name, vhost_name):
    """How the log names a queue (and its store)."""
    return f"'{name}' in vhost '{vhost_name}'"


DEFAULT_MAX_DEDUP_CACHE_SIZE = 1_000_000     # [main] max_deduplication_cache_size


def make_deduper(arguments, max_size):
    """x-message-deduplication's companions, as LavinMQ reads them. The
    size was checked against max_size when declared (check_dedup_size); a
    definition from before the cap, or from a larger one, is cut to it."""
    from lavinmq._core.dedup import Deduper
    header = arguments.get("x-deduplication-header")
    return Deduper(header if isinstance(header, str) else None,
                   min(arguments.get("x-cache-size") or 128, max_size), arguments.get("x-cache-ttl") or None)


def check_dedup_size(arguments, max_size, class_id, method_id):
    """x-cache-size is the tenant's to choose: up to the broker's
    max_deduplication_cache_size, so that what a cache may take (40 bytes
    an entry, allocated at once) is known before it is taken."""
    if not arguments or arguments.get("x-message-deduplication") is not True:
        return
    size = arguments.get("x-cache-size")
    if isinstance(size, int) and size > max_size:
        raise PreconditionFailed(f"x-cache-size {size} is larger than the broker allows "
                                 f"(max_deduplication_cache_size {max_size})", class_id, method_id)


class Queue(CoreQueue):
    # no per-queue __dict__ (~340 bytes a queue). Never list a name the core
    # class declares (consumer_timeout, closed ...): a slot would hide it from Cython
    __slots__ = ("durable", "exclusive_owner", "auto_delete", "arguments", "had_consumers", "direct_reply",
                 "policy", "operator_policy", "effective_policy_definition", "settings",
                 "expires", "last_used", "_expires_timer",
                 "__weakref__")

    def __init__(self, vhost, name, store, durable=True, exclusive_owner=None,
                 auto_delete=False, arguments=None):
        super().__init__(name, vhost, store)
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or EMPTY
        self.had_consumers = False
        self.direct_reply = False       # a channel's amq.rabbitmq.reply-to queue
        self.routing_version = vhost.routing_version    # the core's: dead-lettering checks it
        self.policy = None              # name of the policy that applies
        self.operator_policy = None
        self.effective_policy_definition = EMPTY
        self.settings = EMPTY           # policy key -> value in effect
        self.expires = None             # ms unused before the queue is deleted
        self.last_used = time.monotonic()
        self._expires_timer = None
        if self.arguments.get("x-single-active-consumer") is True:
            self.set_single_active(True)
        if self.arguments.get("x-message-deduplication") is True:
            self.set_dedup(make_deduper(self.arguments, vhost.max_dedup_cache_size))
        if not store.fresh and os.path.exists(self._paused_path):
            self.set_paused(True)

    @property
    def exclusive(self):
        return self.exclusive_owner is not None

    @property
    def max_priority(self):
        return getattr(self.store, "max_priority", None)

    def check_equivalent(self, durable, auto_delete, arguments):
        # exclusivity is checked by the vhost (405, not 406), as RabbitMQ does
        check_equivalent("queue", self.name, self.vhost.name,
                         (("durable", self.durable, durable), ("auto_delete", self.auto_delete, auto_delete)),
                         self.arguments, arguments, 50)

    # -- settings ------------------------------------------------------------------

    def apply_effective(self, policy, operator_policy, definition, settings):
        """From lavinmq.policy: what the arguments and policies make of this
        queue. Takes effect on what it holds now."""
        self.policy = policy.name if policy else None
        self.operator_policy = operator_policy.name if operator_policy else None
        self.effective_policy_definition = definition
        self.settings = settings
        dlx = settings.get("dead-letter-exchange")
        self.apply_settings(ttl=settings.get("message-ttl"), max_length=settings.get("max-length"),
                            max_length_bytes=settings.get("max-length-bytes"),
                            overflow=settings.get("overflow", "drop-head"),
                            dlx=dlx, dlrk=settings.get("dead-letter-routing-key") if dlx is not None else None)
        self.set_delivery_limit(settings.get("delivery-limit"))
        timeout = settings.get("consumer-timeout", self.vhost.consumer_timeout)
        if timeout and not self.consumer_timeout and self.unacked_count:
            # deliveries made while the queue had no timeout were not timed:
            # they are from now (a policy set later used to miss them)
            now = int(time.time() * 1000)
            for conn in list(self.vhost.connections):
                for ch in conn.open_channels():
                    ch.time_held(self, now)
        self.consumer_timeout = timeout or 0
        expires = settings.get("expires")
        if expires != self.expires:
            self.expires = expires
            self._arm_expires()

    def lookup_dead_letter_exchange(self):
        if self.dlx is None:
            return None
        return self.vhost.exchanges.get(self.dlx.decode("utf-8", "surrogateescape"))

    # -- pause and resume (LavinMQ): a paused queue delivers nothing ------------------------

    @property
    def _paused_path(self):
        return os.path.join(self.store.dir, "paused")

    def pause(self):
        """Kept across restarts by a `paused` file in the queue's directory."""
        if not self.paused:
            open(self._paused_path, "w").close()
            changes.changed(self._paused_path)
            self.set_paused(True)

    def resume(self):
        if self.paused:
            try:
                os.unlink(self._paused_path)
            except FileNotFoundError:
                pass
            changes.removed(self._paused_path)
            self.set_paused(False)

    # -- x-expires: deleted after being unused for that long --------------------------

    def touch(self):
        """Used: a consumer came or went, a basic.get, a redeclare."""
        self.last_used = time.monotonic()
        if self.expires is not None:
            self._arm_expires()

    def _arm_expires(self):
        if self._expires_timer is not None:
            self._expires_timer.cancel()
            self._expires_timer = None
        if self.expires is None or self.consumers:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        delay = max(0.0, self.last_used + self.expires / 1000 - time.monotonic())
        self._expires_timer = loop.call_later(delay, self._check_expires)

    def _check_expires(self):
        self._expires_timer = None
        if self.closed or self.expires is None or self.consumers:
            return
        if time.monotonic() - self.last_used < self.expires / 1000 - 0.001:
            self._arm_expires()
            return
        if self.vhost.queues.get(self.name) is self:
            log.info("queue %s in vhost %s unused for %d ms: deleted", self.name, self.vhost.name,
                     self.expires)
            self.vhost.delete_queue(self.name)

    # -- consumers ----------------------------------------------------------------------

    def add_consumer(self, consumer):
        self.had_consumers = True
        super().add_consumer(consumer)
        self.touch()
        self._consumers_changed()

    def remove_consumer(self, consumer):
        super().remove_consumer(consumer)
        self.touch()
        self._consumers_changed()

    def _consumers_changed(self):
        # a federated queue consumes its upstream while it has consumers (lavinmq.federation)
        federation = getattr(self.vhost, "federation", None)
        if federation is not None:
            federation.consumers_changed(self)

    def stop(self):
        """Deleted or shut down: no timer may fire any more."""
        self.stop_timers()
        if self._expires_timer is not None:
            self._expires_timer.cancel()
            self._expires_timer = None

    def __hash__(self):
        return id(self)

    def __str__(self):
        # the store's log name (a string per queue would cost 100,000 queues 8 MB)
        return log_name(self.name, self.vhost.name)

    def __repr__(self):
        return f"<Queue {self.name!r} ready={self.message_count} consumers={self.consumer_count}>"
