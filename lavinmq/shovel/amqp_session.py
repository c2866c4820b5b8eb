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
import asyncio
import logging

from lavinmq._core.relay import Relay
from lavinmq.client.connection import ChannelClosed, ClientError, ConnectionClosed, connect

log = logging.getLogger("lavinmq.shovel")

CONSUMER_TAG = "Shovel"
CH = 1


class AMQPSession:
    def __init__(self, shovel, src_uri, dest_uri):
        self.shovel = shovel
        self.config = shovel.config
        self.src_uri = src_uri
        self.dest_uri = dest_uri
        self.src = None
        self.dst = None
        self.relay = None
        self.loop = asyncio.get_running_loop()
        self.outcome = self.loop.create_future()     # True: done (delete-after); an exception: failed
        self.counted = shovel.message_count
        self.consuming = False
        self._drained = None

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
        relay.set_dest_frame_max(self.dst.frame_max)
        await self.src.open_channel(CH)
        await self.dst.open_channel(CH)
        queue, count = await self._source_queue()
        stop_after = self._stop_after(count)
        if stop_after == 0:
            return True     # src-delete-after queue-length of an empty queue: nothing to move
        relay.stop_after = stop_after or 0
        prefetch = cfg.src_prefetch_count
        if stop_after and prefetch:
            prefetch = min(prefetch, stop_after)
        if cfg.ack_mode != "no-ack":
            await self.src.qos(CH, prefetch)
        if cfg.dest_queue is not None:
            await self._declare(self.dst, cfg.dest_queue)     # may reopen the channel: confirms after it
        if cfg.ack_mode == "on-confirm":
            await self.dst.confirm_select(CH)
        self.src.on_read = self._source_read
        self.dst.on_read = self._dest_read
        self.src.on_method = self._source_method
        self.dst.on_method = self._dest_method
        self.dst.on_pause = self._pause_source
        self.dst.on_resume = self._resume_source
        args = dict(cfg.src_consumer_args)
        exclusive = "x-stream-offset" not in args
        await self.src.consume(CH, queue, CONSUMER_TAG, no_ack=cfg.ack_mode == "no-ack", exclusive=exclusive,
                               arguments=args)
        self.consuming = True
        self.shovel.running(self.src_uri, self.dest_uri)
        closed = asyncio.ensure_future(asyncio.wait([self.src.closed, self.dst.closed],
                                                    return_when=asyncio.FIRST_COMPLETED))
        try:
            await asyncio.wait([closed, self.outcome], return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if self.outcome.done():
            return self.outcome.result()
        for conn in (self.src, self.dst):
            if conn.closed.done():
                raise conn.closed.result()
        raise ConnectionClosed("connection lost")

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

    async def _declare(self, conn, queue):
        """Passive first, as LavinMQ: an existing queue is used whatever its
        arguments; a missing one is declared durable."""
        try:
            return await conn.queue_declare(CH, queue, passive=True)
        except ChannelClosed as exc:
            if exc.code != 404:
                raise
        await conn.open_channel(CH)
        return await conn.queue_declare(CH, queue, durable=True)

    async def _source_queue(self):
        cfg = self.config
        if cfg.src_queue is not None:
            name, count, _ = await self._declare(self.src, cfg.src_queue)
            return name, count
        name, count, _ = await self.src.queue_declare(CH, "", durable=False, exclusive=True, auto_delete=True)
        await self.src.queue_bind(CH, name, cfg.src_exchange, cfg.src_exchange_key or "")
        return name, count

    # -- once per read batch -------------------------------------------------------------

    def _source_read(self):
        relay = self.relay
        out = relay.take_dest()
        if out:
            self.dst.write(out)
            if self.config.ack_mode == "on-publish":
                relay.ack_published()
        self._flush_acks()
        self.shovel.message_count = self.counted + relay.messages
        if relay.done and not self.outcome.done():
            self.outcome.set_result(True)

    def _dest_read(self):
        relay = self.relay
        self._flush_acks()
        if relay.nacked and not self.outcome.done():
            self.outcome.set_exception(ClientError(f"the destination refused {relay.nacked} message(s) "
                                                   f"(basic.nack)"))
        if relay.done and not self.outcome.done():
            self.outcome.set_result(True)
        if self._drained is not None and not relay.outstanding and not self._drained.done():
            self._drained.set_result(None)

    def _flush_acks(self):
        acks = self.relay.take_source()
        if acks:
            self.src.write(acks)

    def _pause_source(self):
        if self.src is not None and self.src.transport is not None:
            self.src.transport.pause_reading()

    def _resume_source(self):
        if self.src is not None and self.src.transport is not None and not self.src.transport.is_closing():
            self.src.transport.resume_reading()

    def _source_method(self, ch, cid, mid, args):
        if (cid, mid) == (60, 30) and not self.outcome.done():       # the server cancelled our consumer
            self.outcome.set_exception(ClientError("the source cancelled the consumer (queue deleted?)"))
        elif (cid, mid) == (20, 40) and not self.outcome.done():
            self.outcome.set_exception(ChannelClosed(f"source channel closed: {args[0]} {args[1]}", args[0]))

    def _dest_method(self, ch, cid, mid, args):
        if (cid, mid) == (20, 40) and not self.outcome.done():
            self.outcome.set_exception(ChannelClosed(f"destination channel closed: {args[0]} {args[1]}",
                                                     args[0]))

    # -- the end ---------------------------------------------------------------------------

    async def close(self, graceful, timeout=5.0):
        """graceful: stop consuming, let the destination confirm what it
        has (acking it at the source), then close. Else close at once: the
        source requeues whatever was not acked."""
        if graceful and self.consuming and self._alive():
            self.consuming = False
            try:
                async with asyncio.timeout(timeout):
                    await self.src.cancel(CH, CONSUMER_TAG)
                    # after cancel-ok no delivery follows: what was read is published
                    if self.relay.outstanding and self.config.ack_mode == "on-confirm":
                        self._drained = self.loop.create_future()
                        await self._drained
                    self._flush_acks()
            except (ClientError, asyncio.TimeoutError):
                pass
        for conn in (self.src, self.dst):
            if conn is not None:
                if graceful and not conn.closed.done():
                    await conn.close(timeout=min(timeout, 2.0))
                elif conn.transport is not None:
                    conn.abort(ConnectionClosed("closed", 200))

    def _alive(self):
        return all(c is not None and not c.closed.done() for c in (self.src, self.dst))
