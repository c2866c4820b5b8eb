"""log_exchange: the broker's log lines as messages, as LavinMQ does — on
the internal topic exchange amq.lavinmq.log of vhost "/", routing key the
level, body "logger - message". Records are queued by the logging handler
and published from the event loop, one batch per loop turn, so logging
from inside the broker (even while publishing) never re-enters it."""
import asyncio
import logging
import struct
import time

from lavinmq._core import codec

EXCHANGE = "amq.lavinmq.log"
LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error",
          logging.CRITICAL: "fatal"}


class LogExchangeHandler(logging.Handler):
    def __init__(self, server, loop):
        super().__init__(logging.INFO)
        self.server = server
        self.loop = loop
        self.pending = []
        self.scheduled = False

    def emit(self, record):
        try:
            line = (LEVELS.get(record.levelno, record.levelname.lower()),
                    f"{record.name} - {record.getMessage()}", record.created)
        except Exception:
            return
        self.pending.append(line)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon_threadsafe(self.flush_to_exchange)

    def flush_to_exchange(self):
        self.scheduled = False
        lines, self.pending = self.pending, []
        vhost = self.server.vhosts.get("/")
        ex = vhost.exchanges.get(EXCHANGE) if vhost else None
        if ex is None:
            return
        for level, text, created in lines:
            props = {"content_type": "text/plain", "timestamp": int(created)}
            body = text.encode("utf-8", "replace")
            rec = (struct.pack("<q", int(time.time() * 1000)) + bytes([len(EXCHANGE)]) + EXCHANGE.encode()
                   + bytes([len(level)]) + level.encode() + codec.encode_properties(props, True)
                   + struct.pack("<Q", len(body)) + body)
            queues, _ = ex.resolve(level, {})
            for q in queues:
                q.publish_record(rec)


def install(server):
    vhost = server.vhosts.get("/")
    if vhost is None:
        logging.getLogger("lavinmq.server").warning('log_exchange is on but vhost "/" is missing')
        return None
    if EXCHANGE not in vhost.exchanges:
        vhost.declare_exchange(EXCHANGE, "topic", True, False, True, {}, persist=False)
    handler = LogExchangeHandler(server, asyncio.get_running_loop())
    logging.getLogger().addHandler(handler)
    return handler
