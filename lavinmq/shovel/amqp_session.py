"""One connected spell of a shovel to an AMQP destination: the source and
destination connections, set up as LavinMQ does (docs/shovels.md), with a
Relay between them that moves the messages as bytes.

Source: src-queue is consumed (declared when it does not exist);
src-exchange gets a server-named exclusive queue bound with
src-exchange-key. The consumer is exclusive (not on a stream, where the
offset argument asks for a shared reader). Destination: dest-queue through
the default exchange (declared when missing), or dest-exchange with
dest-exchange-key, else the message's own routing key.

ack-mode on-confirm acks the source only for what the destination has
confirmed, in one basic.ack (multiple) per batch of confirms; on-publish
acks what has been written to the destination, once per read; no-ack
consumes without acks. A destination that refuses a message (basic.nack)
ends the spell: the source keeps what was not confirmed."""
import logging

from lavinmq._core.relay import Relay
from lavinmq.client.connection import connect
from lavinmq.client.session import CH, RelaySession, declare_queue

log = logging.getLogger("lavinmq.shovel")

CONSUMER_TAG = "Shovel"


class AMQPSession(RelaySession):
    consumer_tag = CONSUMER_TAG

    def __init__(self, shovel, src_uri, dest_uri):
        super().__init__(shovel, shovel.config.ack_mode)
        self.shovel = shovel
        self.config = shovel.config
        self.src_uri = src_uri
        self.dest_uri = dest_uri

    @property
    def server(self):
        return self.shovel.store.server

    async def run(self):
        cfg = self.config
        name = self.shovel.name
        if cfg.dest_queue is not None:
            exchange = b""      # the default exchange, the queue's name as the key
        else:
            exchange = cfg.dest_exchange.encode("utf-8", "surrogateescape")
        self.relay = relay = Relay(CH, CH, 131072, cfg.ack_mode, dest_exchange=exchange, dest_key=self._dest_key())
        self.src = await connect(self.src_uri, f"Shovel {name} source", self.server, relay.source)
        self.dst = await connect(self.dest_uri, f"Shovel {name} sink", self.server, relay.dest)
        await self.src.open_channel(CH)
        await self.dst.open_channel(CH)
        queue, count = await self._source_queue()
        stop_after = self._stop_after(count)
        if stop_after == 0:
            return True     # src-delete-after queue-length of an empty queue: nothing to move
        relay.stop_after = stop_after or 0
        await self._qos(stop_after)
        if cfg.dest_queue is not None:
            await declare_queue(self.dst, CH, cfg.dest_queue)     # may reopen the channel: confirms after it
        if cfg.ack_mode == "on-confirm":
            await self.dst.confirm_select(CH)
        self.attach()
        await self._consume(queue)
        return await self.wait()

    async def _qos(self, stop_after):
        prefetch = self.config.src_prefetch_count
        if stop_after and prefetch:
            prefetch = min(prefetch, stop_after)
        if self.config.ack_mode != "no-ack":
            await self.src.qos(CH, prefetch)

    async def _consume(self, queue):
        args = dict(self.config.src_consumer_args)
        exclusive = "x-stream-offset" not in args       # a stream reader shares the queue
        await self.src.consume(CH, queue, CONSUMER_TAG, no_ack=self.config.ack_mode == "no-ack",
                               exclusive=exclusive, arguments=args)
        self.consuming = True
        self.shovel.running()

    def _dest_key(self):
        cfg = self.config
        if cfg.dest_queue is not None:
            return cfg.dest_queue.encode("utf-8", "surrogateescape")
        if cfg.dest_exchange_key is not None:
            return cfg.dest_exchange_key.encode("utf-8", "surrogateescape")
        return None

    def _stop_after(self, count):
        """None: never; else the number of messages to move."""
        after = self.config.src_delete_after
        if after == "never":
            return None
        if after == "queue-length":
            return count
        return max(0, after - self.shovel.message_count)

    async def _source_queue(self):
        cfg = self.config
        if cfg.src_queue is not None:
            name, count, _ = await declare_queue(self.src, CH, cfg.src_queue)
            return name, count
        name, count, _ = await self.src.queue_declare(CH, "", durable=False, exclusive=True, auto_delete=True)
        await self.src.queue_bind(CH, name, cfg.src_exchange, cfg.src_exchange_key or "")
        return name, count
