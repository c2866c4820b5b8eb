"""Channel control methods: declarations, bindings, consumers, qos, tx and
confirm selection. The message path (publish, deliver, ack) is in
`_core.channel`; this class only adds what happens once per method."""
import base64
import logging
import secrets

from lavinmq import churn
from lavinmq._core.channel import Channel as CoreChannel, Consumer
from lavinmq.errors import (
    AccessRefused, ChannelNotImplemented, ChannelResourceError, NotAllowed, NotFound, NotImplemented_,
    PreconditionFailed,
)
from lavinmq.arguments import check_client_queue, validate_consumer
from lavinmq.exchange import DefaultExchange
from lavinmq.queue.kinds import queue_type

log = logging.getLogger("lavinmq.channel")

DIRECT_REPLY = "amq.rabbitmq.reply-to"


class AMQPChannel(CoreChannel):
    # class-level, so the cdef class needs no extra fields
    def __init__(self, connection, channel_id):
        super().__init__(connection.state, channel_id)
        self.prefetch_consumer = connection.config.default_consumer_prefetch    # until basic.qos says otherwise
        self.connection = connection
        self.vhost = connection.vhost
        self.user = connection.user

    # -- permissions -------------------------------------------------------------

    def _check(self, kind, what, name, class_id, method_id):
        """kind: configure, write or read (User.can_<kind>)."""
        if not getattr(self.user, "can_" + kind)(self.vhost.name, name):
            raise AccessRefused(
                f"access to {what} '{name}' in vhost '{self.vhost.name}' refused for user "
                f"'{self.user.name}'", class_id, method_id)

    def can_configure(self, name, what, class_id, method_id):
        self._check("configure", what, name, class_id, method_id)

    def can_write(self, name, what, class_id, method_id):
        self._check("write", what, name, class_id, method_id)

    def can_read(self, name, what, class_id, method_id):
        self._check("read", what, name, class_id, method_id)

    # -- the publish path's one upcall: an exchange the cache did not have -------

    def lookup_exchange(self, name):
        if name == "amq.default":
            name = ""
        ex = self.vhost.exchanges.get(name)
        if ex is None:
            raise NotFound(f"no exchange '{name}' in vhost '{self.vhost.name}'", 60, 40)
        if ex.internal:
            raise AccessRefused(f"cannot publish to internal exchange '{name}' in vhost "
                                f"'{self.vhost.name}'", 60, 40)
        # RabbitMQ checks the default exchange under its name amq.default
        self.can_write(name or "amq.default", "exchange", 60, 40)
        return ex

    # -- exchange ---------------------------------------------------------------

    def exchange_declare(self, args):
        _, name, type_name, passive, durable, auto_delete, internal, nowait, arguments = args
        if not passive:
            self.can_configure(name, "exchange", 40, 10)
        self.vhost.declare_exchange(name, type_name, durable, auto_delete, internal, arguments, passive)
        if not nowait:
            self.send_durable(40, 11)

    def exchange_delete(self, args):
        _, name, if_unused, nowait = args
        self.can_configure(name, "exchange", 40, 20)
        self.vhost.delete_exchange(name, if_unused)
        if not nowait:
            self.send_durable(40, 21)

    def exchange_bind(self, args):
        _, dest, src, rk, nowait, arguments = args
        self.can_write(dest, "exchange", 40, 30)
        self.can_read(src, "exchange", 40, 30)
        self.vhost.bind_exchange(dest, src, rk, arguments)
        if not nowait:
            self.send_durable(40, 31)

    def exchange_unbind(self, args):
        _, dest, src, rk, nowait, arguments = args
        self.can_write(dest, "exchange", 40, 40)
        self.can_read(src, "exchange", 40, 40)
        self.vhost.unbind_exchange(dest, src, rk, arguments)
        if not nowait:
            self.send_durable(40, 51)

    # -- queue ------------------------------------------------------------------

    def queue_declare(self, args):
        _, name, passive, durable, exclusive, auto_delete, nowait, arguments = args
        conn = self.connection
        if passive and name == DIRECT_REPLY:
            # clients check that direct reply-to is there, as RabbitMQ allows
            if not nowait:
                self.send(50, 11, (name, 0, 0))
            return
        server_named = not name and not passive
        if server_named:
            # the name is chosen here so that the configure right is checked
            # on it, as RabbitMQ does (users limited to ^alice\. get none)
            name = self.vhost.new_queue_name()
        if not passive:
            self.can_configure(name, "queue", 50, 10)
            check_client_queue(arguments)
            if conn.server.memory_alarm and name not in self.vhost.queues:
                raise PreconditionFailed(f"cannot declare queue '{name}' in vhost '{self.vhost.name}': the "
                                         f"broker is low on memory (memory alarm)", 50, 10)
        q = self.vhost.declare_queue(name, durable, conn if exclusive else None, auto_delete,
                                     arguments, passive, connection=conn, server_named=server_named)
        if q.exclusive_owner is conn and q not in conn.exclusive_queues:
            conn.exclusive_queues.append(q)
        conn.last_queue = q.name
        churn.count("queue_declared")
        if not nowait:
            self.send_durable(50, 11, (q.name, q.message_count, q.consumer_count))

    def _queue_name(self, name):
        # an empty queue name means the last queue declared on this channel's connection
        if name == "":
            name = self.connection.last_queue or ""
            if not name:
                raise NotFound("no previously declared queue", 50, 0)
        return name

    def queue_bind(self, args):
        _, queue, exchange, rk, nowait, arguments = args
        queue = self._queue_name(queue)
        self.can_write(queue, "queue", 50, 20)
        self.can_read(exchange, "exchange", 50, 20)
        replay = self.vhost.bind_queue(queue, exchange, rk, arguments, connection=self.connection)
        if nowait:
            return
        syncer = self.connection.server.syncer
        if replay is None:
            self.send_durable(50, 21)
        elif syncer is not None:
            # a persistent exchange's stored messages were copied: the bind-ok
            # says they are in the queue, on disk as a confirm's are
            replay.when_done(lambda: syncer.after_flush(self._bind_ok))
        else:
            replay.when_done(self._bind_ok)

    def _bind_ok(self):
        if self.closing or self.state.closed:
            return
        self.send(50, 21)
        self.connection.flush()         # from a loop callback: nothing else flushes it

    def queue_unbind(self, args):
        _, queue, exchange, rk, arguments = args
        queue = self._queue_name(queue)
        self.can_write(queue, "queue", 50, 50)
        self.can_read(exchange, "exchange", 50, 50)
        self.vhost.unbind_queue(queue, exchange, rk, arguments, connection=self.connection)
        self.send_durable(50, 51)

    def queue_purge(self, args):
        _, queue, nowait = args
        queue = self._queue_name(queue)
        self.can_read(queue, "queue", 50, 30)
        q = self.vhost.get_queue(queue, 50, 30, self.connection)
        count = q.purge()
        if not nowait:
            # on a cluster's leader, once the followers have the acks: a
            # failover right after purge-ok must not bring the messages back
            self.send_durable(50, 31, (count,))

    def queue_delete(self, args):
        _, queue, if_unused, if_empty, nowait = args
        queue = self._queue_name(queue)
        self.can_configure(queue, "queue", 50, 40)
        q = self.vhost.queues.get(queue)
        if q is not None:
            self.vhost.check_exclusive(q, self.connection, 50, 40)
        count = self.vhost.delete_queue(queue, if_unused, if_empty)
        if not nowait:
            self.send_durable(50, 41, (count,))

    # -- basic ------------------------------------------------------------------

    def basic_qos(self, args):
        prefetch_size, prefetch_count, global_ = args
        if prefetch_size:
            raise NotImplemented_("prefetch_size is not supported", 60, 10)
        if global_:
            self.prefetch_global = prefetch_count
            for c in self.consumers.values():
                c.queue.notify()
        else:
            self.prefetch_consumer = prefetch_count
        self.send(60, 11)

    def set_prefetch(self, prefetch):
        """The management API sets the consumer prefetch (LavinMQ's PUT
        /api/channels/{name}): its consumers take it at once."""
        self.prefetch_consumer = prefetch
        for c in self.consumers.values():
            c.prefetch = prefetch
            c.queue.notify()

    def basic_consume(self, args):
        _, queue, tag, no_local, no_ack, exclusive, nowait, arguments = args
        if queue == DIRECT_REPLY:
            queue = self._direct_reply_queue(no_ack)
        queue = self._queue_name(queue)
        self.can_read(queue, "queue", 60, 20)
        q = self.vhost.get_queue(queue, 60, 20, self.connection)
        self._check_open(q, 60, 20)
        if not tag:
            tag = "amq.ctag-" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        elif tag in self.consumers:
            raise NotAllowed(f"attempt to reuse consumer tag '{tag}'", 60, 20)
        if exclusive and q.consumers:
            raise AccessRefused(f"queue '{queue}' in vhost '{self.vhost.name}' in exclusive use", 60, 20)
        if any(c.exclusive for c in q.consumers):
            raise AccessRefused(f"queue '{queue}' in vhost '{self.vhost.name}' in exclusive use", 60, 20)
        validate_consumer(arguments)
        limit = self.connection.config.max_consumers_per_channel
        if limit and len(self.consumers) >= limit:
            raise ChannelResourceError(f"Max {limit} consumers per channel reached", 60, 20)
        if self.prefetch_global and queue_type(q.arguments) == "quorum":
            # RabbitMQ's refusal, a connection error: Celery turns global QoS off for these
            raise NotImplemented_(f"queue '{queue}' in vhost '{self.vhost.name}' does not support global qos",
                                  60, 20)
        if self.connection.draining and not getattr(q, "direct_reply", False):
            # the broker is stopping: answered, and cancelled at once, as at the drain's start
            if not nowait:
                self.send(60, 21, (tag,))
            if self.connection.capabilities.get("consumer_cancel_notify"):
                self.send(60, 30, (tag, True))
            return
        if getattr(q, "is_stream", False):
            c = q.new_consumer(self, tag, no_ack, exclusive, arguments)
        else:
            priority = (arguments or {}).get("x-priority") or 0
            c = Consumer(self, tag, q, no_ack, exclusive, priority, arguments or {})
        self.add_consumer_slot(c)
        self.consumers[tag] = c
        churn.count("consumer_added")
        if not nowait:
            self.send(60, 21, (tag,))
        q.add_consumer(c)

    def _direct_reply_queue(self, no_ack):
        """RabbitMQ's direct reply-to: a no-ack consumer on the pseudo-queue
        gets a queue of this channel's own; publishes from this channel with
        reply_to amq.rabbitmq.reply-to are given its name (in _core), and
        replies to that name reach this consumer only."""
        if not no_ack:
            raise PreconditionFailed("reply consumer cannot acknowledge", 60, 20)
        if self.direct_reply is not None:
            raise PreconditionFailed("reply consumer already set", 60, 20)
        conn = self.connection
        name = DIRECT_REPLY + "." + base64.urlsafe_b64encode(secrets.token_bytes(18)).decode()
        q = self.vhost.declare_queue(name, False, conn, True, {}, persist=False, connection=conn)
        q.direct_reply = True
        conn.exclusive_queues.append(q)
        self.direct_reply = name.encode()
        return name

    def basic_cancel(self, args):
        tag, nowait = args
        c = self.consumers.pop(tag, None)
        if c is not None:
            self._remove_consumer(c)
        if not nowait:
            self.send(60, 31, (tag,))

    def _remove_consumer(self, c):
        churn.count("consumer_removed")
        q = c.queue
        if getattr(q, "direct_reply", False):
            self.direct_reply = None
        q.remove_consumer(c)
        self.release_consumer_slot(c)
        if q.auto_delete and q.had_consumers and not q.consumers and q.name in self.vhost.queues:
            self.vhost.delete_queue(q.name)

    def cancel_consumer(self, c):
        """The management API cancels a consumer (LavinMQ's DELETE
        /api/consumers/...): it leaves its queue, and the client is told
        with basic.cancel if it understands it."""
        if self.consumers.pop(c.tag, None) is None:
            return
        self._remove_consumer(c)
        if self.connection.capabilities.get("consumer_cancel_notify") and not self.closing:
            self.send(60, 30, (c.tag, True))
            self.connection.flush()

    def server_cancel(self, c):
        """The queue is gone: tell the client, if it understands basic.cancel."""
        self.consumers.pop(c.tag, None)
        self.release_consumer_slot(c)
        if self.connection.capabilities.get("consumer_cancel_notify") and not self.closing:
            self.send(60, 30, (c.tag, True))
            self.connection.flush()

    def cancel_for_drain(self, notify):
        """The broker is stopping (lavinmq.drain): the consumers leave their
        queues, their unacked deliveries stay with the channel to be
        settled; notify: the client understands basic.cancel. A direct
        reply-to consumer stays: it is this channel's own mailbox, where
        replies to work finishing meanwhile arrive."""
        for c in list(self.consumers.values()):
            if getattr(c.queue, "direct_reply", False):
                continue
            self.consumers.pop(c.tag, None)
            self._remove_consumer(c)
            if notify:
                self.send(60, 30, (c.tag, True))

    def basic_get(self, args):
        _, queue, no_ack = args
        queue = self._queue_name(queue)
        self.can_read(queue, "queue", 60, 70)
        q = self.vhost.get_queue(queue, 60, 70, self.connection)
        self._check_open(q, 60, 70)
        if self.connection.draining:
            self.send(60, 72, ("",))        # the broker is stopping: nothing new is delivered
            return
        if getattr(q, "is_stream", False):
            raise ChannelNotImplemented(f"queue '{queue}' in vhost '{self.vhost.name}' is a stream: "
                                        f"basic.get is not supported, consume it instead", 60, 70)
        q.touch()
        CoreChannel.basic_get(self, q, no_ack)

    def _check_open(self, q, class_id, method_id):
        # RabbitMQ answers 404 for a queue that exists but cannot serve
        if q.closed:
            raise NotFound(f"queue '{q.name}' in vhost '{self.vhost.name}' is closed: "
                           f"{q.store.error or 'see the broker log'}", class_id, method_id)

    def basic_recover(self, args):
        self.requeue_all()
        self.send(60, 111)

    def basic_recover_async(self, args):
        self.requeue_all()

    # -- confirm / tx -------------------------------------------------------------

    def confirm_select(self, args):
        if self.tx:
            raise PreconditionFailed("cannot switch from tx to confirm mode", 85, 10)
        self.confirm = True
        if not args[0]:
            self.send(85, 11)

    def tx_select(self, args):
        if self.confirm:
            raise PreconditionFailed("cannot switch from confirm to tx mode", 90, 10)
        self.tx = True
        self.send(90, 11)

    def tx_commit(self, args):
        if not self.tx:
            raise PreconditionFailed("channel is not transactional", 90, 20)
        self.commit()
        syncer = self.connection.server.syncer
        if syncer is None:
            self.send(90, 21)
        else:
            syncer.after_flush(self._commit_ok)

    def _commit_ok(self):
        # after the flush that made the committed messages durable
        if self.closing or self.state.closed:
            return None
        self.send(90, 21)
        return self.connection

    def tx_rollback(self, args):
        if not self.tx:
            raise PreconditionFailed("channel is not transactional", 90, 30)
        self.rollback()
        self.send(90, 31)

    # -- channel ------------------------------------------------------------------

    def channel_flow(self, args):
        self.flow_active = args[0]
        self.send(20, 21, (self.flow_active,))
        if self.flow_active:
            for c in self.consumers.values():
                c.queue.notify()

    def access_request(self, args):
        self.send(30, 11, (1,))

    def send(self, class_id, method_id, args=()):
        self.connection.send_method(self.id, class_id, method_id, tuple(args))

    def send_durable(self, class_id, method_id, args=()):
        """The reply to a definition change: on a cluster's leader it goes
        out once the change is on every in-sync replica's disk, as LavinMQ
        2.9 does (with the next flush, which the change brought on)."""
        syncer = self.connection.server.syncer
        if syncer is None or syncer.replicator is None:
            self.send(class_id, method_id, args)
            return
        syncer.after_flush(lambda: self._send_later(class_id, method_id, args))

    def _send_later(self, class_id, method_id, args):
        if self.closing or self.state.closed:
            return None
        self.send(class_id, method_id, args)
        return self.connection

    def cleanup(self):
        """The channel is closing: requeue what is unacked, drop consumers."""
        self.closing = True
        self.abandon_publish()
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for c in consumers:
            self._remove_consumer(c)
        self.requeue_all()
        self.rollback()


# (class_id, method_id) -> AMQPChannel method name
HANDLERS = {
    (20, 20): "channel_flow",
    (30, 10): "access_request",
    (40, 10): "exchange_declare",
    (40, 20): "exchange_delete",
    (40, 30): "exchange_bind",
    (40, 40): "exchange_unbind",
    (50, 10): "queue_declare",
    (50, 20): "queue_bind",
    (50, 30): "queue_purge",
    (50, 40): "queue_delete",
    (50, 50): "queue_unbind",
    (60, 10): "basic_qos",
    (60, 20): "basic_consume",
    (60, 30): "basic_cancel",
    (60, 70): "basic_get",
    (60, 100): "basic_recover_async",
    (60, 110): "basic_recover",
    (85, 10): "confirm_select",
    (90, 10): "tx_select",
    (90, 20): "tx_commit",
    (90, 30): "tx_rollback",
}
