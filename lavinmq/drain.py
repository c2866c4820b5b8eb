"""A clean stop's grace period (SIGTERM/SIGINT; LavinMQ issue #2199).

Before it, a stop closed every connection at once: a client that finished
its work meanwhile had its acks dropped and got the messages again. Now,
before Server.stop closes the connections:

1. nothing new comes in: the client listeners close (AMQP, AMQPS, MQTT,
   MQTTS and their UNIX sockets: a connect is refused), a WebSocket upgrade
   is answered 503, and a connection still logging in is refused at
   connection.open (320) or CONNECT (server unavailable);
2. nothing new goes out: every AMQP consumer leaves its queue, and a client
   that announced consumer_cancel_notify is told with basic.cancel; a
   basic.consume meanwhile is answered and cancelled at once, a basic.get
   gets get-empty;
3. what clients hold they may still settle: acks, nacks and rejects are
   applied and publishes stored and confirmed, for up to [main]
   shutdown_drain_timeout seconds, until no delivery is unacknowledged, or
   until a second signal;
4. reading stops and what was stored is flushed, and so confirmed (on a
   cluster's leader, once the in-sync replicas have it: the drain runs
   before the leader hands over, lavinmq.clustering.node).

MQTT connections stay open through it (their PUBACKs are sent) and are
closed with the rest; links between brokers (shovels, federation) stop
meanwhile on their own terms (their last confirms acked). Nothing here
runs per message: the wait reads each channel's unacked count a few
times a second.
"""
import asyncio
import logging
import signal
import time

from lavinmq import sdnotify

log = logging.getLogger("lavinmq.server")

POLL = 0.05     # s between looks at what clients still hold


class StopSignals:
    """SIGTERM and SIGINT: the first asks for a stop (`stop`), any later one
    for haste (`hurry`: the grace period ends at once)."""

    def __init__(self, loop, stop=None):
        self.stop = stop if stop is not None else asyncio.Event()
        self.hurry = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.received, sig)

    def received(self, sig):
        if not self.stop.is_set():
            self.stop.set()
        elif not self.hurry.is_set():
            log.warning("%s again: the shutdown's grace period ends now", signal.Signals(sig).name)
            self.hurry.set()


def unsettled(server):
    """Deliveries that clients hold and have not settled."""
    return sum(getattr(conn, "unsettled", _none)() for conn in list(server.connections))


def _none():
    return 0


async def drain(server, timeout, hurry=None):
    """Steps 1-4 above; returns the deliveries left unsettled (requeued when
    their connections close). Safe to call more than once."""
    if server.draining:
        return unsettled(server)
    server.draining = True
    server.protocols.close()
    # shovels and federation links stop meanwhile, on their own terms
    links = asyncio.ensure_future(server.stop_links())
    for conn in list(server.connections):
        begin = getattr(conn, "begin_drain", None)
        if begin is not None:
            try:
                begin()
            except Exception:       # a bug of ours must not keep the broker from stopping
                log.exception("draining %s", getattr(conn, "name", conn))
    left = unsettled(server)
    if left and timeout > 0 and not (hurry is not None and hurry.is_set()):
        started = time.monotonic()
        log.info("draining: consumers cancelled, %d deliveries unacknowledged on %d connections; waiting up to "
                 "%g s for their acks ([main] shutdown_drain_timeout)", left, len(server.connections), timeout)
        sdnotify.notify(f"STATUS=draining: {left} deliveries unacknowledged, up to {timeout:g} s")
        deadline = started + timeout
        while left and time.monotonic() < deadline and not (hurry is not None and hurry.is_set()):
            await asyncio.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
            left = unsettled(server)
        if left:
            log.warning("drain ended after %.1f s with %d deliveries unacknowledged: they are requeued",
                        time.monotonic() - started, left)
        else:
            log.info("drained in %.2f s: every delivery settled", time.monotonic() - started)
    await links
    await quiesce(server)
    return left


async def quiesce(server):
    """No more is read from any connection; what was stored reaches the disk
    and its publishers get their confirms, before the connections close."""
    for conn in list(server.connections):
        transport = conn.transport
        if transport is not None and not transport.is_closing():
            try:
                transport.pause_reading()
            except (RuntimeError, AttributeError):
                pass
    if server.syncer is not None:
        await server.syncer.close()
