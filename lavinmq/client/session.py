"""What shovels and federation links share: a source connection consumed
on channel 1 and a destination connection published to on channel 1, with
a Relay between them (lavinmq._core.relay), driven once per read batch.

ack modes: on-confirm acks the source up to what the destination has
confirmed (one basic.ack multiple per batch of confirms); on-publish acks
what has been written to the destination, once per read; no-ack consumes
without acks. A destination that refuses a message (basic.nack) ends the
session: the source keeps what was not confirmed.

`owner` is the shovel or link: its message_count follows the relay."""
import asyncio

from lavinmq.client.connection import ChannelClosed, ClientError, ConnectionClosed

CH = 1


class RelaySession:
    consumer_tag = "Shovel"

    def __init__(self, owner, ack_mode):
        self.owner = owner
        self.ack_mode = ack_mode
        self.src = None
        self.dst = None
        self.relay = None
        self.loop = asyncio.get_running_loop()
        self.outcome = self.loop.create_future()     # True: done (delete-after); an exception: failed
        self.counted = owner.message_count
        self.consuming = False
        self._drained = None

    def attach(self):
        """Once both connections are up and the relay has its readers in them."""
        self.relay.set_dest_frame_max(self.dst.frame_max)
        self.src.on_read = self._source_read
        self.dst.on_read = self._dest_read
        self.src.on_method = self._source_method
        self.dst.on_method = self._dest_method
        self.dst.on_pause = self._pause_source
        self.dst.on_resume = self._resume_source

    async def wait(self):
        """Until done, failed, or a connection closes (raised)."""
        closed = asyncio.ensure_future(asyncio.wait([c.closed for c in (self.src, self.dst) if c is not None],
                                                    return_when=asyncio.FIRST_COMPLETED))
        try:
            await asyncio.wait([closed, self.outcome], return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if self.outcome.done():
            return self.outcome.result()
        for conn in (self.src, self.dst):
            if conn is not None and conn.closed.done():
                raise conn.closed.result()
        raise ConnectionClosed("connection lost")

    def fail(self, exc):
        if not self.outcome.done():
            self.outcome.set_exception(exc)

    # -- once per read batch -------------------------------------------------------------

    def _source_read(self):
        relay = self.relay
        out = relay.take_dest()
        if out:
            self.dst.write(out)
            if self.ack_mode == "on-publish":
                relay.ack_published()
        self._flush_acks()
        self.owner.message_count = self.counted + relay.messages
        if relay.done and not self.outcome.done():
            self.outcome.set_result(True)

    def _dest_read(self):
        relay = self.relay
        self._flush_acks()
        if relay.nacked:
            self.fail(ClientError(f"the destination refused {relay.nacked} message(s) (basic.nack)"))
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
        if ch != CH:
            return
        if (cid, mid) == (60, 30):       # the server cancelled our consumer
            self.fail(ClientError("the source cancelled the consumer (queue deleted?)"))
        elif (cid, mid) == (20, 40):
            self.fail(ChannelClosed(f"source channel closed: {args[0]} {args[1]}", args[0]))

    def _dest_method(self, ch, cid, mid, args):
        if ch == CH and (cid, mid) == (20, 40):
            self.fail(ChannelClosed(f"destination channel closed: {args[0]} {args[1]}", args[0]))

    # -- the end ---------------------------------------------------------------------------

    async def stop_consuming(self, timeout):
        """Cancel the consumer and let the destination confirm what was
        read before cancel-ok (acking it at the source), within timeout."""
        if not self.consuming or not self._alive():
            return
        self.consuming = False
        try:
            async with asyncio.timeout(timeout):
                await self.src.cancel(CH, self.consumer_tag)
                if self.relay.outstanding and self.ack_mode == "on-confirm":
                    self._drained = self.loop.create_future()
                    await self._drained
                self._flush_acks()
        except (ClientError, asyncio.TimeoutError):
            pass

    async def close(self, graceful, timeout=5.0):
        """graceful: stop consuming, let what was read be confirmed, then
        close. Else close at once: the source requeues what was not acked."""
        if graceful:
            await self.stop_consuming(timeout)
        elif self.src is not None and self.relay is not None and not self.src.closed.done():
            self._flush_acks()      # what the destination confirmed before it failed: fewer redeliveries
        for conn in (self.src, self.dst):
            if conn is not None:
                if graceful and not conn.closed.done():
                    await conn.close(timeout=min(timeout, 2.0))
                elif conn is self.src:
                    conn.close_now()
                elif conn.transport is not None:
                    conn.abort(ConnectionClosed("closed", 200))

    def _alive(self):
        return all(c is not None and not c.closed.done() for c in (self.src, self.dst))


async def declare_queue(conn, ch, queue, durable=True, arguments=None):
    """Passive first, as LavinMQ: an existing queue is used whatever its
    arguments; a missing one is declared. -> (name, messages, consumers)"""
    try:
        return await conn.queue_declare(ch, queue, passive=True)
    except ChannelClosed as exc:
        if exc.code != 404:
            raise
    await conn.open_channel(ch)
    return await conn.queue_declare(ch, queue, durable=durable, arguments=arguments)
