"""The broker's once-a-second round: heartbeats of every connection, their
consumer timeouts (every [main] consumer_timeout_loop_interval rounds),
the resource alarms, giving freed heap back to the system, and unmapping
segments of idle queues every few rounds."""
import asyncio
import logging
import time

from lavinmq import process
from lavinmq._core.queue import tick_rough_clock

log = logging.getLogger("lavinmq.server")

INTERVAL = 1.0          # heartbeats are checked this often
UNMAP_EVERY = 5         # rounds between unmapping idle segments


class Housekeeping:
    def __init__(self, server):
        self.server = server
        self._task = None

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self):
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self):
        rounds = 0
        server = self.server
        while True:
            await asyncio.sleep(INTERVAL)
            rounds += 1
            tick_rough_clock()
            now = time.monotonic()
            wall_ms = int(time.time() * 1000)
            # [main] consumer_timeout_loop_interval: every that many rounds
            timeouts = rounds % max(1, getattr(server.config, "consumer_timeout_loop_interval", 1)) == 0
            for conn in list(server.connections):
                try:
                    conn.check_heartbeat(now)
                    if timeouts:
                        conn.check_consumer_timeouts(wall_ms)
                except Exception:
                    log.exception("heartbeat check failed for %s", conn.name)
            server.alarms.check()
            process.trim_if_due()
            if rounds % UNMAP_EVERY == 0:
                server.vhosts.unmap_idle()
