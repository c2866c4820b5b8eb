"""A virtual host: its exchanges, queues and bindings, their persistence in
definitions.amqp, and the stores of its queues."""
import hashlib
import logging
import os
import secrets
import shutil
import base64

from lavinmq import definitions as defs
from lavinmq._core.routing import RoutingVersion
from lavinmq._core.segment import MessageStore
from lavinmq.args import check_equivalent
from lavinmq.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from lavinmq.exchange import DefaultExchange, Exchange, exchange_class
from lavinmq.queue import Queue
from lavinmq.queue import stream

log = logging.getLogger("lavinmq.vhost")

PREDECLARED = (
    ("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
    ("amq.headers", "headers"), ("amq.match", "headers"),
)


def sha1(name):
    return hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()


def check_name(kind, name, class_id, method_id):
    if len(name.encode("utf-8", "surrogateescape")) > 255:
        raise PreconditionFailed(f"{kind} name too long", class_id, method_id)
    if "\n" in name or "\r" in name:
        raise PreconditionFailed(f"{kind} name '{name!r}' contains a newline", class_id, method_id)


class VHost:
    def __init__(self, name, data_dir, segment_size=8 * 1024 * 1024, syncer=None):
        self.name = name
        self.syncer = syncer        # lavinmq.sync.Syncer when confirms wait for the disk
        self.dir = os.path.join(data_dir, sha1(name))
        self.transient_dir = os.path.join(self.dir, "transient")
        self.segment_size = segment_size
        self.routing_version = RoutingVersion()
        self.exchanges = {}
        self.queues = {}
        self.connections = set()
        self.limits = {}            # "max-connections", "max-queues"
        os.makedirs(self.dir, exist_ok=True)
        shutil.rmtree(self.transient_dir, ignore_errors=True)
        self.definitions = defs.DefinitionsFile(os.path.join(self.dir, "definitions.amqp"), syncer)
        self._predeclare()
        self._load()
        self.definitions.open()

    # -- boot ------------------------------------------------------------------

    def _predeclare(self):
        self.exchanges[""] = DefaultExchange(self, "", durable=True)
        for name, type_name in PREDECLARED:
            self.exchanges[name] = exchange_class(type_name)(self, name, durable=True)

    def _load(self):
        frames = self.definitions.read()
        for key, args in frames:
            try:
                self._replay(key, args)
            except Exception as exc:
                log.warning("vhost %s: skipping definition %s %r: %s", self.name, key, args, exc)
        # what survived is written back compactly: replays stop growing the file
        self.definitions.rewrite(self._definition_frames())

    def _replay(self, key, args):
        if key == defs.EXCHANGE_DECLARE:
            _, name, type_name, _, durable, auto_delete, internal, _, arguments = args
            self.declare_exchange(name, type_name, durable, auto_delete, internal, arguments, persist=False)
        elif key == defs.EXCHANGE_DELETE:
            self.delete_exchange(args[1], persist=False)
        elif key == defs.QUEUE_DECLARE:
            _, name, _, durable, exclusive, auto_delete, _, arguments = args
            self.declare_queue(name, durable, None, auto_delete, arguments, persist=False)
        elif key == defs.QUEUE_DELETE:
            self.delete_queue(args[1], persist=False)
        elif key == defs.QUEUE_BIND:
            _, queue, exchange, rk, _, arguments = args
            self.bind_queue(queue, exchange, rk, arguments, persist=False)
        elif key == defs.QUEUE_UNBIND:
            _, queue, exchange, rk, arguments = args
            self.unbind_queue(queue, exchange, rk, arguments, persist=False)
        elif key == defs.EXCHANGE_BIND:
            _, dest, src, rk, _, arguments = args
            self.bind_exchange(dest, src, rk, arguments, persist=False)
        elif key == defs.EXCHANGE_UNBIND:
            _, dest, src, rk, _, arguments = args
            self.unbind_exchange(dest, src, rk, arguments, persist=False)

    def _definition_frames(self):
        out = []
        for ex in self.exchanges.values():
            if ex.durable and not isinstance(ex, DefaultExchange) and not ex.name.startswith("amq."):
                out.append((defs.EXCHANGE_DECLARE, (0, ex.name, ex.type, False, True, ex.auto_delete,
                                                    ex.internal, False, ex.arguments)))
        for q in self.queues.values():
            if q.durable and not q.exclusive:
                out.append((defs.QUEUE_DECLARE, (0, q.name, False, True, False, q.auto_delete, False,
                                                 q.arguments)))
        for ex in self.exchanges.values():
            for b in ex.bindings.values():
                if self._binding_durable(ex, b.destination):
                    if isinstance(b.destination, Exchange):
                        out.append((defs.EXCHANGE_BIND, (0, b.destination.name, ex.name, b.routing_key,
                                                         False, b.arguments)))
                    else:
                        out.append((defs.QUEUE_BIND, (0, b.destination.name, ex.name, b.routing_key,
                                                      False, b.arguments)))
        return out

    def _persist(self, key, args):
        self.definitions.append(key, args)
        if self.definitions.needs_compaction():
            self.definitions.rewrite(self._definition_frames())

    @staticmethod
    def _binding_durable(source, destination):
        if not source.durable or not destination.durable:
            return False
        return not getattr(destination, "exclusive", False)

    # -- exchanges ---------------------------------------------------------------

    def declare_exchange(self, name, type_name, durable, auto_delete, internal, arguments,
                         passive=False, persist=True):
        ex = self.exchanges.get(name)
        if passive:
            if ex is None:
                raise NotFound(f"no exchange '{name}' in vhost '{self.name}'", 40, 10)
            return ex
        if name == "":
            raise AccessRefused("operation not permitted on the default exchange", 40, 10)
        if ex is not None:
            check_equivalent("exchange", name, self.name,
                             (("type", ex.type, type_name), ("durable", ex.durable, durable),
                              ("auto_delete", ex.auto_delete, auto_delete), ("internal", ex.internal, internal)),
                             ex.arguments, arguments, 40)
            return ex
        if name.startswith("amq."):
            raise AccessRefused(
                f"exchange name '{name}' contains reserved prefix 'amq.*'", 40, 10)
        check_name("exchange", name, 40, 10)
        ex = exchange_class(type_name)(self, name, durable, auto_delete, internal, arguments)
        self.exchanges[name] = ex
        self.routing_version.bump()
        if durable and persist:
            self._persist(defs.EXCHANGE_DECLARE, (0, name, type_name, False, True, auto_delete,
                                                  internal, False, arguments or {}))
        return ex

    def delete_exchange(self, name, if_unused=False, persist=True):
        ex = self.exchanges.get(name)
        if ex is None:
            return
        if name == "" or name.startswith("amq."):
            raise AccessRefused(f"operation not permitted on exchange '{name}'", 40, 20)
        if if_unused and ex.bindings:
            raise PreconditionFailed(f"exchange '{name}' in vhost '{self.name}' in use", 40, 20)
        del self.exchanges[name]
        ex.deleted = True
        ex.bindings.clear()
        for other in self.exchanges.values():
            if ex in (b.destination for b in other.bindings.values()):
                other.remove_destination(ex)
                self._maybe_auto_delete_exchange(other)
        self.routing_version.bump()
        if ex.durable and persist:
            self._persist(defs.EXCHANGE_DELETE, (0, name, False, False))

    def _maybe_auto_delete_exchange(self, ex):
        if ex.auto_delete and not ex.bindings and ex.name in self.exchanges:
            self.delete_exchange(ex.name)

    def get_exchange(self, name, class_id, method_id):
        ex = self.exchanges.get(name)
        if ex is None:
            raise NotFound(f"no exchange '{name}' in vhost '{self.name}'", class_id, method_id)
        return ex

    # -- queues --------------------------------------------------------------------

    def declare_queue(self, name, durable, exclusive_owner, auto_delete, arguments,
                      passive=False, persist=True):
        q = self.queues.get(name)
        if passive:
            if q is None:
                raise NotFound(f"no queue '{name}' in vhost '{self.name}'", 50, 10)
            self.check_exclusive(q, exclusive_owner, 50, 10)
            return q
        if name == "":
            name = "amq.gen-" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        elif q is None and name.startswith("amq."):
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'", 50, 10)
        if q is not None:
            self.check_exclusive(q, exclusive_owner, 50, 10)
            q.check_equivalent(durable, exclusive_owner is not None, auto_delete, arguments)
            return q
        check_name("queue", name, 50, 10)
        limit = self.limits.get("max-queues")
        if limit is not None and len(self.queues) >= limit:
            raise PreconditionFailed(f"cannot declare queue '{name}': queue limit in vhost "
                                     f"'{self.name}' ({limit}) is reached", 50, 10)
        transient = not durable or exclusive_owner is not None
        store_dir = os.path.join(self.transient_dir if transient else self.dir, sha1(name))
        if stream.is_stream(arguments):
            stream.check_declare(durable, exclusive_owner is not None, auto_delete, arguments)
            q = stream.open_stream(self, name, store_dir, arguments)
        else:
            store = MessageStore(store_dir, self.segment_size, f"'{name}' in vhost '{self.name}'")
            if not transient:
                store.syncer = self.syncer
            q = Queue(self, name, store, durable, exclusive_owner, auto_delete, arguments)
        self.queues[name] = q
        self.routing_version.bump()
        if durable and not transient and persist:
            self._persist(defs.QUEUE_DECLARE, (0, name, False, True, False, auto_delete, False,
                                               arguments or {}))
        return q

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
        self.check_exclusive(q, connection, class_id, method_id)
        return q

    def delete_queue(self, name, if_unused=False, if_empty=False, persist=True):
        """-> number of messages the queue held."""
        q = self.queues.get(name)
        if q is None:
            return 0
        if if_unused and q.consumers:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' in use", 50, 40)
        if if_empty and q.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' is not empty", 50, 40)
        count = q.message_count
        del self.queues[name]
        q.closed = True
        for ex in list(self.exchanges.values()):
            if any(b.destination is q for b in ex.bindings.values()):
                ex.remove_destination(q)
                self._maybe_auto_delete_exchange(ex)
        self.routing_version.bump()
        for c in list(q.consumers):
            c.channel.server_cancel(c)
        q.store.destroy()
        if q.durable and not q.exclusive and persist:
            self._persist(defs.QUEUE_DELETE, (0, name, False, False, False))
        return count

    # -- bindings ---------------------------------------------------------------

    def bind_queue(self, queue, exchange, routing_key, arguments, persist=True, connection=None):
        q = self.get_queue(queue, 50, 20, connection) if persist else self.queues.get(queue)
        ex = self.get_exchange(exchange, 50, 20)
        if q is None:
            raise NotFound(f"no queue '{queue}' in vhost '{self.name}'", 50, 20)
        if isinstance(ex, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 50, 20)
        if ex.bind(q, routing_key, arguments) and persist and self._binding_durable(ex, q):
            self._persist(defs.QUEUE_BIND, (0, queue, exchange, routing_key, False, arguments or {}))

    def unbind_queue(self, queue, exchange, routing_key, arguments, persist=True, connection=None):
        q = self.get_queue(queue, 50, 50, connection) if persist else self.queues.get(queue)
        ex = self.get_exchange(exchange, 50, 50)
        if isinstance(ex, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 50, 50)
        if q is not None and ex.unbind(q, routing_key, arguments):
            if persist and self._binding_durable(ex, q):
                self._persist(defs.QUEUE_UNBIND, (0, queue, exchange, routing_key, arguments or {}))
            self._maybe_auto_delete_exchange(ex)

    def bind_exchange(self, destination, source, routing_key, arguments, persist=True):
        dest = self.get_exchange(destination, 40, 30)
        src = self.get_exchange(source, 40, 30)
        if isinstance(dest, DefaultExchange) or isinstance(src, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 40, 30)
        if src.bind(dest, routing_key, arguments) and persist and self._binding_durable(src, dest):
            self._persist(defs.EXCHANGE_BIND, (0, destination, source, routing_key, False, arguments or {}))

    def unbind_exchange(self, destination, source, routing_key, arguments, persist=True):
        dest = self.get_exchange(destination, 40, 40)
        src = self.get_exchange(source, 40, 40)
        if isinstance(dest, DefaultExchange) or isinstance(src, DefaultExchange):
            raise AccessRefused("operation not permitted on the default exchange", 40, 40)
        if src.unbind(dest, routing_key, arguments):
            if persist and self._binding_durable(src, dest):
                self._persist(defs.EXCHANGE_UNBIND, (0, destination, source, routing_key, False,
                                                     arguments or {}))
            self._maybe_auto_delete_exchange(src)

    # -- housekeeping -------------------------------------------------------------

    def unmap_idle(self):
        for q in self.queues.values():
            q.store.unmap_idle()

    def close(self):
        for q in self.queues.values():
            q.store.close()
        self.definitions.close()
        shutil.rmtree(self.transient_dir, ignore_errors=True)
