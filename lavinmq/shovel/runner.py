"""A running shovel: connects, moves messages until something fails, shows
the failure in its state and tries again after reconnect-delay, until it is
paused, deleted or done (src-delete-after).

States, as the API shows them: starting (connecting), running, paused,
error (with the error; it is waiting to reconnect) and terminated."""
import asyncio
import logging
import random
import time

from lavinmq.client.connection import ClientError, describe
from lavinmq.shovel.amqp_session import AMQPSession

log = logging.getLogger("lavinmq.shovel")

STOP_TIMEOUT = 5.0      # a stopping shovel waits this long for its last confirms


class Shovel:
    def __init__(self, store, name, config):
        self.store = store
        self.name = name
        self.config = config
        self.state = "starting"
        self.error = None
        self.message_count = 0          # moved since this shovel was (re)started here
        self.timestamp = time.time()    # of the last state change
        self.session = None
        self.task = None
        self.stopping = False

    @property
    def vhost(self):
        return self.store.vhost

    def _set_state(self, state, error=None):
        if state != self.state or error != self.error:
            self.timestamp = time.time()
        self.state = state
        self.error = error

    def start(self, after=None):
        """after: a task to wait for first (the shovel this one replaces)."""
        self.stopping = False
        self._set_state("starting")
        self.task = asyncio.get_running_loop().create_task(self._run(after), name=f"shovel {self.name}")

    async def stop(self, state="terminated"):
        """Graceful: the source consumer is cancelled, what was published is
        confirmed and acked (for up to STOP_TIMEOUT), then both connections close."""
        self.stopping = True
        session = self.session
        if session is not None:
            try:
                await session.close(graceful=True, timeout=STOP_TIMEOUT)
            except Exception:
                log.exception("shovel %s: closing failed", self.name)
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass
            self.task = None
        self._set_state(state)

    async def _run(self, after):
        if after is not None:
            try:
                await after
            except Exception:
                pass
        while not self.stopping:
            self._set_state("starting", self.error)
            session = self.session = self.new_session()
            try:
                finished = await session.run()
            except asyncio.CancelledError:
                await session.close(graceful=False)
                raise
            except Exception as exc:
                if self.stopping:
                    break
                text = describe(exc)
                if not isinstance(exc, (ClientError, OSError)):
                    log.exception("shovel %s in vhost %s failed", self.name, self.vhost.name)
                else:
                    log.warning("shovel %s in vhost %s: %s; reconnecting in %g s", self.name, self.vhost.name,
                                text, self.config.reconnect_delay)
                self._set_state("error", text)
                await session.close(graceful=False)
            else:
                await session.close(graceful=True, timeout=STOP_TIMEOUT)
                if finished:
                    log.info("shovel %s in vhost %s moved what it was asked to (src-delete-after): deleted",
                             self.name, self.vhost.name)
                    self._set_state("terminated")
                    self.store.finished(self)
                    return
            finally:
                self.session = None
            if self.stopping:
                break
            await asyncio.sleep(self.config.reconnect_delay)

    def new_session(self):
        if self.config.http:
            from lavinmq.shovel.http_session import HTTPSession
            return HTTPSession(self, random.choice(self.config.src_uris), random.choice(self.config.dest_uris))
        return AMQPSession(self, random.choice(self.config.src_uris), random.choice(self.config.dest_uris))

    def running(self, src_uri, dest_uri):
        log.info("shovel %s in vhost %s running", self.name, self.vhost.name)
        self._set_state("running")

    def to_json(self):
        from lavinmq.client.uri import scrub
        cfg = self.config
        out = {"name": self.name, "vhost": self.vhost.name, "type": "dynamic", "state": self.state,
               "error": self.error, "message_count": self.message_count,
               "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.timestamp)),
               "src_uri": scrub(cfg.src_uris[0]), "dest_uri": scrub(cfg.dest_uris[0]),
               "src_protocol": "amqp091", "dest_protocol": "http" if cfg.http else "amqp091",
               "ack_mode": cfg.ack_mode, "src_prefetch_count": cfg.src_prefetch_count,
               "src_delete_after": cfg.src_delete_after, "reconnect_delay": cfg.reconnect_delay}
        for key, value in (("src_queue", cfg.src_queue), ("src_exchange", cfg.src_exchange),
                           ("src_exchange_key", cfg.src_exchange_key), ("dest_queue", cfg.dest_queue),
                           ("dest_exchange", cfg.dest_exchange), ("dest_exchange_key", cfg.dest_exchange_key)):
            if value is not None:
                out[key] = value
        return out
