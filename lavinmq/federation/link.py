"""Federation links, as LavinMQ's docs/federation.md describes them: one per
(upstream, federated exchange or queue), each an AMQP connection to the
upstream and an in-process one to this broker with a Relay between them.

Exchange link: on the upstream, the upstream exchange (declared like ours
when missing), a queue "federation: X -> host:vhost:Y" and an
x-federation-upstream exchange of the same name bound to it; every binding
of our exchange is mirrored as a binding from the upstream exchange to that
helper exchange (x-bound-from counts the hops), kept in step while
connected. The queue's messages are published to our exchange with the
routing key they had, an x-received-from entry appended; those that already
went max-hops hops are dropped (acked). Bindings removed while the link was
down stay upstream until the link is deleted (as LavinMQ): they cost traffic,
never a message.

Queue link: consumer-driven. It consumes the upstream queue while our
queue has consumers and cancels when it has none; what it has fetched is
safe in our queue either way.

On shutdown a link only disconnects (the upstream queue keeps buffering);
when the policy, the upstream or the exchange goes, an exchange link also
deletes what it made upstream."""
import asyncio
import logging
import random
import socket
import time

from lavinmq._core.codec import Long, encode_table_bytes
from lavinmq._core.relay import Relay
from lavinmq.client.connection import ChannelClosed, ClientError, connect, describe
from lavinmq.client.run_loop import STOP_TIMEOUT, RelayRunner
from lavinmq.client.session import CH, RelaySession, declare_queue
from lavinmq.client.uri import AMQPURI, parse
from lavinmq.exchange.base import freeze

log = logging.getLogger("lavinmq.federation")

CONTROL = 2             # the upstream channel for declares and bindings (errors there spare the consumer)


def local_uri(vhost):
    return AMQPURI("amqp", "", 5672, "", "", vhost.name)


class Link(RelayRunner):
    """stop() only disconnects: what the link made upstream stays (and buffers)."""
    kind = None
    logger = log

    def __init__(self, federation, upstream, resource):
        super().__init__()
        self.federation = federation
        self.upstream = upstream
        self.resource = resource            # the federated exchange's or queue's name
        self.uri = parse(upstream.uris[0])

    @property
    def vhost(self):
        return self.federation.vhost

    @property
    def name(self):
        return f"Federation link: {self.upstream.name}/{self.resource}"

    @property
    def label(self):
        return self.name

    @property
    def reconnect_delay(self):
        return self.upstream.reconnect_delay

    def new_session(self):
        self.uri = parse(random.choice(self.upstream.uris))     # each attempt, one of the upstream's URIs
        return self.make_session()

    def ended(self, result):
        raise ClientError("the link ended")     # a link has no end of its own: it reconnects

    async def delete(self):
        """Stop for good, and remove what the link made upstream."""
        await self.stop()
        await self.cleanup()

    async def cleanup(self):
        pass

    def received_from(self, server_properties, redelivered):
        entry = {"uri": self.uri.scrubbed(), self.kind: self.upstream_name, "redelivered": redelivered,
                 "vhost": self.uri.vhost}
        cluster = server_properties.get("cluster_name")
        if isinstance(cluster, (str, bytes)):
            entry["cluster-name"] = cluster.decode() if isinstance(cluster, bytes) else cluster
        return b"F" + encode_table_bytes(entry)

    def to_json(self):
        out = {"upstream": self.upstream.name, "vhost": self.vhost.name, "type": self.kind,
               "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.timestamp)),
               "uri": self.uri.scrubbed(), "resource": self.resource, self.kind: self.resource,
               f"upstream_{self.kind}": self.upstream_name, "status": self.state, "error": self.error,
               "consumer-tag": self.upstream.tag, "message_count": self.message_count}
        return out


class LinkSession(RelaySession):
    """Upstream (source) -> this broker (destination)."""

    def __init__(self, link):
        super().__init__(link, link.upstream.ack_mode)
        self.link = link
        self.consumer_tag = link.upstream.tag

    @property
    def server(self):
        return self.link.federation.server

    async def connect(self, relay):
        link = self.link
        self.relay = relay
        self.src = await connect(link.uri, link.name, self.server, relay.source)
        self.dst = await connect(local_uri(link.vhost), link.name + " (local)", self.server, relay.dest)
        relay.set_received_from(link.received_from(self.src.server_properties, False),
                                link.received_from(self.src.server_properties, True))
        await self.src.open_channel(CH)
        await self.dst.open_channel(CH)

    async def prepare_local(self):
        if self.ack_mode != "no-ack":
            await self.src.qos(CH, self.link.upstream.prefetch_count)
        if self.ack_mode == "on-confirm":
            await self.dst.confirm_select(CH)
        self.attach()

    async def consume(self, queue):
        await self.src.consume(CH, queue, self.consumer_tag, no_ack=self.ack_mode == "no-ack")
        self.consuming = True


# -- exchange federation -----------------------------------------------------------------


class ExchangeLink(Link):
    kind = "exchange"

    @property
    def upstream_name(self):
        return self.upstream.exchange or self.resource

    @property
    def queue_name(self):
        return f"federation: {self.upstream_name} -> {socket.gethostname()}:{self.vhost.name}:{self.resource}"

    def make_session(self):
        return ExchangeSession(self)

    def bindings_changed(self):
        if self.session is not None:
            self.session.sync_soon()

    async def cleanup(self):
        """The upstream queue and helper exchange go (their buffered messages with them)."""
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                conn = await connect(self.uri, f"Federation link cleanup: {self.upstream.name}/{self.resource}",
                                     self.federation.server)
                try:
                    await conn.open_channel(CH)
                    await conn.queue_delete(CH, self.queue_name)
                    await conn.exchange_delete(CH, self.queue_name)
                finally:
                    await conn.close()
        except (ClientError, OSError, asyncio.TimeoutError) as exc:
            log.warning("%s: upstream queue and exchange not removed: %s", self.name, describe(exc))


class ExchangeSession(LinkSession):
    def __init__(self, link):
        super().__init__(link)
        self.mirrored = {}          # (routing key, frozen arguments) -> arguments sent upstream
        self.sync_task = None
        self.sync_again = False

    async def run(self):
        link = self.link
        up = link.upstream
        relay = Relay(CH, CH, 131072, up.ack_mode, dest_exchange=link.resource.encode("utf-8", "surrogateescape"),
                      max_hops=up.max_hops)
        await self.connect(relay)
        await self.src.open_channel(CONTROL)
        ex = link.vhost.exchanges.get(link.resource)
        if ex is None:
            raise ClientError(f"exchange '{link.resource}' is gone")
        await self._exchange(link.upstream_name, ex.type, ex.durable, False, False, dict(ex.arguments or {}))
        q_args = {"x-internal-purpose": "federation"}
        if up.expires is not None:
            q_args["x-expires"] = up.expires
        if up.message_ttl is not None:
            q_args["x-message-ttl"] = up.message_ttl
        await declare_queue(self.src, CONTROL, link.queue_name, arguments=q_args)
        await self._exchange(link.queue_name, "x-federation-upstream", True, True, True, {
            "x-downstream-name": socket.gethostname(), "x-downstream-vhost": link.vhost.name,
            "x-internal-purpose": "federation", "x-max-hops": Long(up.max_hops)})     # RabbitMQ wants a long
        await self.src.queue_bind(CONTROL, link.queue_name, link.queue_name, "")
        await self.sync()
        await self.prepare_local()
        await self.consume(link.queue_name)
        link.running()
        return await self.wait()

    async def _exchange(self, name, type_name, durable, auto_delete, internal, arguments):
        try:
            await self.src.exchange_declare(CONTROL, name, type_name, passive=True)
            return
        except ChannelClosed as exc:
            if exc.code != 404:
                raise
        await self.src.open_channel(CONTROL)
        await self.src.exchange_declare(CONTROL, name, type_name, durable=durable, auto_delete=auto_delete,
                                        internal=internal, arguments=arguments)

    def _desired(self):
        """Our exchange's bindings as they are mirrored upstream."""
        link = self.link
        ex = link.vhost.exchanges.get(link.resource)
        out = {}
        if ex is None:
            return out
        for b in list(ex.bindings.values()):
            args = bound_from(b.arguments, link.vhost.name, link.resource, link.upstream.max_hops)
            if args is not None:
                out[(b.routing_key, freeze(b.arguments or {}))] = (b.routing_key, args)
        return out

    async def sync(self):
        """Binds what is missing upstream, unbinds what is no longer here."""
        link = self.link
        while True:
            self.sync_again = False
            desired = self._desired()
            for key in [k for k in self.mirrored if k not in desired]:
                rk, args = self.mirrored.pop(key)
                await self.src.exchange_unbind(CONTROL, link.queue_name, link.upstream_name, rk, args)
            for key, (rk, args) in desired.items():
                if key not in self.mirrored:
                    await self.src.exchange_bind(CONTROL, link.queue_name, link.upstream_name, rk, args)
                    self.mirrored[key] = (rk, args)
            if not self.sync_again:
                return

    def sync_soon(self):
        if not self.consuming:
            return          # run() syncs everything before it consumes
        if self.sync_task is not None and not self.sync_task.done():
            self.sync_again = True
            return
        self.sync_task = asyncio.ensure_future(self._sync_or_fail())

    async def _sync_or_fail(self):
        try:
            await self.sync()
        except ClientError as exc:
            self.fail(ClientError(f"mirroring a binding upstream failed: {exc}"))

    async def close(self, graceful, timeout=5.0):
        if self.sync_task is not None and not self.sync_task.done():
            self.sync_task.cancel()
        await super().close(graceful, timeout)


def bound_from(arguments, vhost, exchange, max_hops):
    """The binding's arguments with x-bound-from as LavinMQ keeps it: the
    hops left come from the binding it was mirrored from (one less) or
    max-hops, whichever is lower; None when no hop is left."""
    args = dict(arguments or {})
    chain = args.get("x-bound-from")
    chain = list(chain) if isinstance(chain, list) else []
    hops = max_hops
    if chain and isinstance(chain[0], dict) and isinstance(chain[0].get("hops"), int):
        hops = min(chain[0]["hops"] - 1, max_hops)
    if hops <= 0:
        return None
    args["x-bound-from"] = [{"vhost": vhost, "exchange": exchange, "hops": hops}] + chain
    return args


# -- queue federation --------------------------------------------------------------------


class QueueLink(Link):
    kind = "queue"

    @property
    def upstream_name(self):
        return self.upstream.queue or self.resource

    def make_session(self):
        return QueueSession(self)

    def consumers_changed(self):
        if self.session is not None:
            self.session.follow_consumers()


class QueueSession(LinkSession):
    def __init__(self, link):
        super().__init__(link)
        self.ready = False
        self.switch = None
        self.queue = None

    async def run(self):
        link = self.link
        up = link.upstream
        relay = Relay(CH, CH, 131072, up.ack_mode, dest_exchange=b"",
                      dest_key=link.resource.encode("utf-8", "surrogateescape"))
        await self.connect(relay)
        await declare_queue(self.src, CH, link.upstream_name)
        await self.prepare_local()
        self.ready = True
        link.running()
        self.follow_consumers()
        return await self.wait()

    def _wanted(self):
        q = self.link.vhost.queues.get(self.link.resource)
        return q is not None and q.consumer_count > 0

    def follow_consumers(self):
        """Consume upstream while our queue has consumers."""
        if not self.ready or self.outcome.done():
            return
        if self.switch is None or self.switch.done():
            self.switch = asyncio.ensure_future(self._switch())

    async def _switch(self):
        try:
            while self._wanted() != self.consuming:
                if self.consuming:
                    self.consuming = False
                    await self.src.cancel(CH, self.consumer_tag)
                else:
                    await self.consume(self.link.upstream_name)
        except ClientError as exc:
            self.fail(exc)

    async def close(self, graceful, timeout=5.0):
        if self.switch is not None and not self.switch.done():
            self.switch.cancel()
        await super().close(graceful, timeout)
