"""A publisher with confirms that goes on through failovers, and the check
of what a queue holds against what was confirmed.

The publisher (aio-pika, in a thread of its own) keeps WINDOW persistent
messages in flight, numbered; a connection that fails takes its unconfirmed
messages with it, and they are published again on the next connection (an
at-least-once publisher, as applications write them: that is where
duplicates come from). It tries the nodes in turn."""
import asyncio
import logging
import threading
import time

import aio_pika
import pika

WINDOW = 32

# a refused connection during a failover is expected here, not news
logging.getLogger("aio_pika").setLevel(logging.CRITICAL)
logging.getLogger("aiormq").setLevel(logging.CRITICAL)


class Publisher:
    def __init__(self, urls, queue, window=WINDOW):
        self.urls = list(urls)
        self.queue = queue
        self.window = window
        self.next_seq = 0
        self.retry = []
        self.attempted = set()
        self.confirmed = {}             # seq -> (monotonic time, connection number)
        self.connections = 0
        self.errors = []
        self._stop = threading.Event()
        self._thread = None

    # -- control (from the test's thread) ------------------------------------------------

    def start(self):
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the publisher did not stop"

    def confirms_after(self, t, connection=0):
        return sorted(ts for ts, c in list(self.confirmed.values()) if ts > t and c > connection)

    def wait_confirm_after(self, t, timeout=20, connection=0):
        """-> the time of the first confirm after t (on a connection made
        after the given one: a confirm already on its way does not count)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            after = self.confirms_after(t, connection)
            if after:
                return after[0]
            time.sleep(0.005)
        raise AssertionError(f"no confirm for {timeout} s; last errors: {self.errors[-5:]}")

    def wait_confirmed(self, n, timeout=30):
        deadline = time.monotonic() + timeout
        while len(self.confirmed) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.confirmed)} of {n} confirmed; last errors: {self.errors[-5:]}")
            time.sleep(0.01)

    # -- the publishing thread ---------------------------------------------------------------

    def _take(self):
        if self.retry:
            return self.retry.pop()
        self.next_seq += 1
        return self.next_seq

    async def _main(self):
        i = 0
        while not self._stop.is_set():
            url = self.urls[i % len(self.urls)]
            i += 1
            try:
                conn = await asyncio.wait_for(aio_pika.connect(url), 3)
            except Exception as exc:
                self.errors.append(f"connect {url}: {exc!r}")
                await asyncio.sleep(0.02)
                continue
            self.connections += 1
            try:
                ch = await asyncio.wait_for(conn.channel(publisher_confirms=True), 5)
                await asyncio.wait_for(ch.declare_queue(self.queue, durable=True), 10)
                await self._publish(ch, self.connections)
            except Exception as exc:
                self.errors.append(f"{url}: {exc!r}")
            finally:
                try:
                    await asyncio.wait_for(conn.close(), 2)
                except Exception:
                    pass

    async def _publish(self, ch, conn_no):
        ex = ch.default_exchange
        inflight = set()
        try:
            while not self._stop.is_set():
                while len(inflight) < self.window:
                    inflight.add(asyncio.ensure_future(self._one(ex, self._take(), conn_no)))
                done, inflight = await asyncio.wait(inflight, timeout=1, return_when=asyncio.FIRST_COMPLETED)
                failed = [t.exception() for t in done if t.exception() is not None]
                if failed:
                    raise failed[0]
        finally:
            for t in inflight:
                t.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)

    async def _one(self, ex, seq, conn_no):
        self.attempted.add(seq)
        try:
            await asyncio.wait_for(ex.publish(aio_pika.Message(b"%d" % seq, delivery_mode=2),
                                              routing_key=self.queue), 10)
        except BaseException:
            self.retry.append(seq)      # unconfirmed: again, on the next connection
            raise
        self.confirmed[seq] = (time.monotonic(), conn_no)


def drain(url, queue, timeout=60):
    """Every message in the queue, as sequence numbers, acked."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    out = []
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=2000)
        left = ch.queue_declare(queue, durable=True, passive=True).method.message_count
        deadline = time.monotonic() + timeout
        for method, _, body in ch.consume(queue, inactivity_timeout=2):
            if method is None:
                if len(out) >= left or time.monotonic() > deadline:
                    break
                continue
            out.append(int(body))
            if len(out) % 500 == 0:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if len(out) >= left:
                ch.basic_ack(method.delivery_tag, multiple=True)
                break
        ch.cancel()
    finally:
        conn.close()
    return out


def check(publisher, delivered):
    """-> (lost, phantoms, duplicates): confirmed but not delivered, delivered
    but never published, delivered more than once."""
    got = set(delivered)
    lost = sorted(set(publisher.confirmed) - got)
    phantoms = sorted(got - publisher.attempted)
    duplicates = len(delivered) - len(got)
    return lost, phantoms, duplicates
