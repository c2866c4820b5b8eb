"""A virtual host: its exchanges, queues and bindings, their persistence in
definitions.amqp, and the stores of its queues."""
import logging
import os
import secrets
import shutil
import base64

from lavinmq import churn, definitions as defs
from lavinmq.definitions_store import DefinitionsStore
from lavinmq._core.routing import RoutingVersion
from lavinmq._core.prio_store import PriorityMessageStore
from lavinmq._core.segment import MessageStore, entity_dir, name_digest as sha1  # noqa: F401 (sha1: server, tests)
from lavinmq.arguments import check_equivalent
from lavinmq import arguments as argspec
from lavinmq.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from lavinmq.exchange import DefaultExchange, exchange_class, freeze, persistent
from lavinmq.policy import PolicyStore
from lavinmq.queue import Queue, kinds, queue_class
from lavinmq.queue.classic import DEFAULT_MAX_DEDUP_CACHE_SIZE, check_dedup_size, log_name, make_deduper
from lavinmq.sync import fsync_dir
from lavinmq.queue import quorum, stream

log = logging.getLogger("lavinmq.vhost")

PREDECLARED = (
    ("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
    ("amq.headers", "headers"), ("amq.match", "headers"),
)


def delayed_form(arguments):
    """x-delayed-message as LavinMQ keeps it: the x-delayed-type is the
    exchange's type, and x-delayed-exchange: true says it delays."""
    arguments = dict(arguments or {})
    delayed_type = arguments.pop("x-delayed-type", None)
    if isinstance(delayed_type, bytes):
        delayed_type = delayed_type.decode("utf-8", "replace")
    if not isinstance(delayed_type, str) or delayed_type == "x-delayed-message":
        raise PreconditionFailed("x-delayed-message exchanges need an x-delayed-type argument "
                                 "(direct, fanout, topic, headers ...)", 40, 10)
    arguments["x-delayed-exchange"] = True
    return delayed_type, arguments


def check_name(kind, name, class_id, method_id):
    if len(name.encode("utf-8", "surrogateescape")) > 255:
        raise PreconditionFailed(f"{kind} name too long", class_id, method_id)
    if "\n" in name or "\r" in name:
        raise PreconditionFailed(f"{kind} name '{name!r}' contains a newline", class_id, method_id)


class VHost:
    def __init__(self, name, data_dir, segment_size=8 * 1024 * 1024, syncer=None, consumer_timeout=None,
                 consistent_hash_algorithm="ring"):
        self.name = name
        self.consistent_hash_algorithm = consistent_hash_algorithm   # x-consistent-hash without x-algorithm
        self.consumer_timeout = consumer_timeout    # ms, the broker's default for every queue
        self.max_dedup_cache_size = DEFAULT_MAX_DEDUP_CACHE_SIZE     # the server sets its setting
        self.syncer = syncer        # lavinmq.sync.Syncer when confirms wait for the disk
        self.dir = entity_dir(data_dir, name)
        self.transient_dir = os.path.join(self.dir, "transient")
        self.segment_size = segment_size
        self.routing_version = RoutingVersion()
        self.exchanges = {}
        self.queues = {}
        self.connections = set()
        self.limits = {}            # "max-connections", "max-queues"
        self.federation = None      # lavinmq.federation.manager.Federation while the vhost has upstreams
        os.makedirs(self.dir, exist_ok=True)
        shutil.rmtree(self.transient_dir, ignore_errors=True)
        self.definitions = DefinitionsStore(self, syncer)
        self.policies = PolicyStore(self)
        self._predeclare()
        self.definitions.load()
        fsync_dir(self.dir)     # definitions.amqp's name (new, or rewritten by load) is durable
        for q in self.queues.values():
            q.note_message_ttls()       # stored messages may carry their own expiration
        self.policies.apply_all()

    @staticmethod
    def _has_binding(source, destination, routing_key, arguments):
        return (destination, routing_key, freeze(arguments or {})) in source.bindings

    @staticmethod
    def binding_durable(source, destination):
        if not source.durable or not destination.durable:
            return False
        return not getattr(destination, "exclusive", False)

    def _predeclare(self):
        self.exchanges[""] = DefaultExchange(self, "", durable=True)
        for name, type_name in PREDECLARED:
            self.exchanges[name] = exchange_class(type_name)(self, name, durable=True)

    # -- exchanges ---------------------------------------------------------------

    def declare_exchange(self, name, type_name, durable, auto_delete, internal, arguments,
                         passive=False, persist=True):
        ex = self.exchanges.get(name)
        if name == "":
            raise AccessRefused("operation not permitted on the default exchange", 40, 10)
        if type_name == "x-delayed-message" and not passive:
            type_name, arguments = delayed_form(arguments)
        if passive:
            if ex is None:
                raise NotFound(f"no exchange '{name}' in vhost '{self.name}'", 40, 10)
            return ex
        if ex is not None:
            check_equivalent("exchange", name, self.name,
                             (("type", ex.type, type_name), ("durable", ex.durable, durable),
                              ("auto_delete", ex.auto_delete, auto_delete), ("internal", ex.internal, internal)),
                             ex.arguments, arguments, 40)
            return ex
        if name.startswith("amq.") and persist:
            raise AccessRefused(
                f"exchange name '{name}' contains reserved prefix 'amq.*'", 40, 10)
        check_name("exchange", name, 40, 10)
        if persist:     # replay takes back what an older version accepted
            argspec.validate_exchange(arguments)
            check_dedup_size(arguments, self.max_dedup_cache_size, 40, 10)
        ex = exchange_class(type_name)(self, name, durable, auto_delete, internal, arguments)
        if (arguments or {}).get("x-message-deduplication") is True:
            ex.dedup = make_deduper(arguments, self.max_dedup_cache_size)
        # on disk before it is live: a declare-ok never outruns its definition
        if durable and persist:
            self.definitions.append(defs.EXCHANGE_DECLARE, (0, name, type_name, False, True, auto_delete,
                                                  internal, False, arguments or {}))
        self.exchanges[name] = ex
        if (arguments or {}).get("x-delayed-exchange") is True:
            self.attach_delay_queue(ex)
        persistent.attach(self, ex)
        self.routing_version.bump()
        self.policies.apply_to_exchange(ex)
        return ex

    def attach_delay_queue(self, ex):
        """x-delayed-message: the exchange's delayed messages wait in a
        store of their own (kept across restarts when the exchange is durable)."""
        from lavinmq.queue.delayed import DelayedMessages
        qname = "amq.delayed." + ex.name
        store_dir = entity_dir(self.dir if ex.durable else self.transient_dir, qname)
        store = MessageStore(store_dir, self.segment_size, log_name(qname, self.name),
                             self.syncer if ex.durable else None)
        dq = DelayedMessages(self, ex, store)
        ex.delay_queue = dq
        self.queues[qname] = dq

    def delete_exchange(self, name, if_unused=False, persist=True):
        ex = self.exchanges.get(name)
        if ex is None:
            return
        if name == "" or name.startswith("amq."):
            raise AccessRefused(f"operation not permitted on exchange '{name}'", 40, 20)
        if if_unused and ex.bindings:
            raise PreconditionFailed(f"exchange '{name}' in vhost '{self.name}' in use", 40, 20)
        if ex.durable and persist:
            self.definitions.append(defs.EXCHANGE_DELETE, (0, name, False, False))
        del self.exchanges[name]
        ex.deleted = True
        ex.clear_bindings()
        if self.federation is not None:
            self.federation.removed(ex, "exchange")
        dq = ex.delay_queue
        if dq is not None:
            ex.delay_queue = None
            dq.stop()
            dq.closed = True
            if self.queues.get(dq.name) is dq:
                del self.queues[dq.name]
            dq.store.destroy()
        persistent.detach(ex)
        self.routing_version.bump()
        # sources that lose their last binding may be auto-delete exchanges
        # themselves: deleting them changes self.exchanges, so walk a snapshot
        for other in list(self.exchanges.values()):
            if any(b.destination is ex for b in other.bindings.values()):
                other.remove_destination(ex)
                self._maybe_auto_delete_exchange(other, persist)
        if persist:
            self.definitions.compact_if_needed()

    def _maybe_auto_delete_exchange(self, ex, persist=True):
        if ex.auto_delete and not ex.bindings and self.exchanges.get(ex.name) is ex:
            self.delete_exchange(ex.name, persist=persist)

    def binding_count(self):
        """Bindings of the vhost's exchanges, not the default exchange's
        implicit ones (as LavinMQ counts): one len() per exchange, no
        binding is walked."""
        default = self.exchanges.get("")
        return sum(len(ex.bindings) for ex in self.exchanges.values() if ex is not default)

    def get_exchange(self, name, class_id, method_id):
        ex = self.exchanges.get(name)
        if ex is None:
            raise NotFound(f"no exchange '{name}' in vhost '{self.name}'", class_id, method_id)
        return ex

    # -- queues --------------------------------------------------------------------

    def new_queue_name(self):
        return "amq.gen-" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")

    def declare_queue(self, name, durable, exclusive_owner, auto_delete, arguments,
                      passive=False, persist=True, connection=None, server_named=False):
        """connection: the declaring connection (None over HTTP); it may use
        its own exclusive queues passively, whatever exclusive flag it sends."""
        q = self.queues.get(name)
        if passive:
            if q is None:
                raise NotFound(f"no queue '{name}' in vhost '{self.name}'", 50, 10)
            self.check_exclusive(q, connection, 50, 10)
            q.touch()
            return q
        if (name == "" or server_named) and persist:
            quorum.check_server_named(arguments)
        if name == "":
            name = self.new_queue_name()
        elif name.startswith("amq.") and persist and not server_named:
            # as RabbitMQ, also for a queue that exists; replay (persist=False)
            # brings back server-named durable queues
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'", 50, 10)
        if q is not None:
            if q.exclusive_owner is not exclusive_owner:
                # RabbitMQ's strict check: the owner and the flag must both match
                raise ResourceLocked(
                    f"cannot obtain exclusive access to locked queue '{name}' in vhost '{self.name}'. "
                    f"It could be originally declared on another connection or the exclusive property "
                    f"value does not match that of the original declaration.", 50, 10)
            q.check_equivalent(durable, auto_delete, arguments)
            q.touch()
            return q
        check_name("queue", name, 50, 10)
        kind = kinds.queue_type(arguments)
        if persist:     # replay takes back what an older version accepted
            argspec.validate_queue(arguments, kind=kind)
            check_dedup_size(arguments, self.max_dedup_cache_size, 50, 10)
        limit = self.limits.get("max-queues")
        if limit is not None and len(self.queues) >= limit:
            raise PreconditionFailed(f"cannot declare queue '{name}': queue limit in vhost "
                                     f"'{self.name}' ({limit}) is reached", 50, 10)
        transient = not durable or exclusive_owner is not None
        if kind == "stream":
            stream.check_declare(durable, exclusive_owner is not None, auto_delete, arguments)
        elif kind == "quorum" and persist:
            quorum.check_declare(name, self.name, durable, exclusive_owner is not None, auto_delete, arguments)
        if durable and not transient and persist:
            # on disk before it is live: a declare-ok never outruns its definition
            self.definitions.append(defs.QUEUE_DECLARE, (0, name, False, True, False, auto_delete, False,
                                               arguments or {}))
        q = self._open_queue(name, durable, exclusive_owner, auto_delete, arguments)
        self.queues[name] = q
        self.exchanges[""].queue_added(q)
        if persist:
            churn.count("queue_created")        # not for definitions replayed at boot
        self.routing_version.bump()
        self.policies.apply_to_queue(q)
        return q

    def _open_queue(self, name, durable, exclusive_owner, auto_delete, arguments):
        """The queue object over its store (loaded from disk if it has one)."""
        transient = not durable or exclusive_owner is not None
        parent = self.transient_dir if transient else self.dir
        store_dir = entity_dir(parent, name)
        max_priority = (arguments or {}).get("x-max-priority")
        syncer = None if transient else self.syncer     # at construction: see MessageStore.set_syncer
        if stream.is_stream(arguments):
            return stream.open_stream(self, name, store_dir, arguments, syncer)
        if isinstance(max_priority, int) and not isinstance(max_priority, bool) and 0 < max_priority <= 255:
            store = PriorityMessageStore(store_dir, self.segment_size, log_name(name, self.name),
                                         max_priority, syncer)
        else:
            store = MessageStore(store_dir, self.segment_size, log_name(name, self.name), syncer)
            # 100,000 idle queues: no path or log-name string of their own
            store.forget_path(parent, name)
        q = queue_class(arguments)(self, name, store, durable, exclusive_owner, auto_delete, arguments)
        store.log_name = q
        return q

    def restart_queue(self, name):
        """LavinMQ's queue restart: a closed queue (its data could not be
        read, or it failed) is opened again from its files, with its
        bindings and policy; its consumers were cancelled. -> False when the
        queue was not closed or is still unreadable."""
        old = self.queues.get(name)
        if old is None or not old.closed or getattr(old, "internal", False):
            return False
        old.store.close()       # a queue closed at runtime: its acks so far reach the disk
        q = self._open_queue(name, old.durable, old.exclusive_owner, old.auto_delete, old.arguments)
        if q.closed:
            return False
        old.stop()
        for c in list(old.consumers):
            c.channel.server_cancel(c)
        self.queues[name] = q
        self.exchanges[""].queue_removed(old)
        self.exchanges[""].queue_added(q)
        for ex in self.exchanges.values():
            moved = [b for b in ex.bindings.values() if b.destination is old]
            if moved:
                ex.remove_destination(old)
                for b in moved:
                    ex.bind(q, b.routing_key, b.arguments)
        q.note_message_ttls()
        self.routing_version.bump()
        self.policies.apply_to_queue(q)
        log.info("queue %s restarted", log_name(name, self.name))
        return True

    def set_limits(self, limits):
        clean = {}
        for key, value in limits.items():
            if key not in ("max-connections", "max-queues"):
                raise ValueError(f"unknown vhost limit {key!r}")
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"vhost limit {key} must be an integer")
            if value >= 0:
                clean[key] = value
        self.limits = clean

    def check_exclusive(self, q, connection, class_id, method_id):
        if q.exclusive_owner is not None and q.exclusive_owner is not connection:
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{q.name}' in vhost '{self.name}'",
                class_id, method_id)

    def get_queue(self, name, class_id, method_id, connection=None):
        q = self.queues.get(name)
        if q is None:
            raise NotFound(f"no queue '{name}' in vhost '{self.name}'", class_id, method_id)
        if getattr(q, "internal", False):
            raise AccessRefused(f"queue '{name}' in vhost '{self.name}' is internal", class_id, method_id)
        self.check_exclusive(q, connection, class_id, method_id)
        return q

    def delete_queue(self, name, if_unused=False, if_empty=False, persist=True):
        """-> number of messages the queue held."""
        q = self.queues.get(name)
        if q is None:
            return 0
        if getattr(q, "internal", False):
            raise AccessRefused(f"queue '{name}' in vhost '{self.name}' is internal: it goes with its "
                                f"exchange", 50, 40)
        if if_unused and q.consumers:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' in use", 50, 40)
        if if_empty and q.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' is not empty", 50, 40)
        count = q.message_count
        if q.durable and not q.exclusive and persist:
            self.definitions.append(defs.QUEUE_DELETE, (0, name, False, False, False))
        del self.queues[name]
        if self.federation is not None:
            self.federation.removed(q, "queue")
        if persist:
            churn.count("queue_deleted")
        self.exchanges[""].queue_removed(q)
        q.closed = True
        q.stop()
        for ex in list(self.exchanges.values()):
            if any(b.destination is q for b in ex.bindings.values()):
                ex.remove_destination(q)
                self._maybe_auto_delete_exchange(ex, persist)
        self.routing_version.bump()
        for c in list(q.consumers):
            c.channel.server_cancel(c)
        q.store.destroy()
        if persist:
            self.definitions.compact_if_needed()
        return count

    # -- bindings ---------------------------------------------------------------

    def bind_queue(self, queue, exchange, routing_key, arguments, persist=True, connection=None):
        """-> None, or the ReplayJob of a binding that asked a persistent
        exchange for its stored messages (done, or going on in the background)."""
        q = self.get_queue(queue, 50, 20, connection) if persist else self.queues.get(queue)
        ex = self.get_exchange(exchange, 50, 20)
        if q is None:
            raise NotFound(f"no queue '{queue}' in vhost '{self.name}'", 50, 20)
        if isinstance(ex, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 50, 20)
        argspec.validate_binding(ex.type, arguments, 50, 20)
        if persist and self.binding_durable(ex, q) and not self._has_binding(ex, q, routing_key, arguments):
            self.definitions.append(defs.QUEUE_BIND, (0, queue, exchange, routing_key, False, arguments or {}))
        if persist and ex.persist is not None and persistent.replay_request(arguments) is not None:
            return persistent.bind_with_replay(self, ex, q, routing_key, arguments)
        ex.bind(q, routing_key, arguments)
        return None

    def unbind_queue(self, queue, exchange, routing_key, arguments, persist=True, connection=None):
        """Unbinding what does not exist (queue, exchange or binding) is
        not an error, as in RabbitMQ and LavinMQ."""
        q = self.queues.get(queue)
        ex = self.exchanges.get(exchange)
        if isinstance(ex, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 50, 50)
        if q is not None and persist:
            self.check_exclusive(q, connection, 50, 50)
        if q is not None and ex is not None and ex.unbind(q, routing_key, arguments):
            if persist and self.binding_durable(ex, q):
                self.definitions.append(defs.QUEUE_UNBIND, (0, queue, exchange, routing_key, arguments or {}))
            self._maybe_auto_delete_exchange(ex, persist)
            if persist:
                self.definitions.compact_if_needed()

    def bind_exchange(self, destination, source, routing_key, arguments, persist=True):
        dest = self.get_exchange(destination, 40, 30)
        src = self.get_exchange(source, 40, 30)
        if isinstance(dest, DefaultExchange) or isinstance(src, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 40, 30)
        argspec.validate_binding(src.type, arguments, 40, 30)
        if persist:
            persistent.refuse_exchange_replay(src, arguments)
        if persist and self.binding_durable(src, dest) and not self._has_binding(src, dest, routing_key, arguments):
            self.definitions.append(defs.EXCHANGE_BIND, (0, destination, source, routing_key, False, arguments or {}))
        src.bind(dest, routing_key, arguments)

    def unbind_exchange(self, destination, source, routing_key, arguments, persist=True):
        dest = self.exchanges.get(destination)
        src = self.exchanges.get(source)
        if isinstance(dest, DefaultExchange) or isinstance(src, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 40, 40)
        if dest is not None and src is not None and src.unbind(dest, routing_key, arguments):
            if persist and self.binding_durable(src, dest):
                self.definitions.append(defs.EXCHANGE_UNBIND, (0, destination, source, routing_key, False,
                                                     arguments or {}))
            self._maybe_auto_delete_exchange(src, persist)
            if persist:
                self.definitions.compact_if_needed()

    # -- housekeeping -------------------------------------------------------------

    def unmap_idle(self):
        for q in self.queues.values():
            q.store.unmap_idle()
        for ex in self.exchanges.values():
            if ex.persist is not None:
                ex.persist.store.unmap_idle()       # also x-persist-ms retention while idle

    def close(self):
        self.policies.close()
        for q in self.queues.values():
            q.stop()
            q.store.close()
        for ex in self.exchanges.values():
            if ex.persist is not None:
                ex.persist.store.close()
        self.definitions.close()
        shutil.rmtree(self.transient_dir, ignore_errors=True)
