"""The broker's recent log in memory, for the UI's log page: the last
LOG_KEEP records of the `lavinmq` loggers (whatever level they pass).
GET /api/logs answers them as text (a download, as LavinMQ's); with
?after=SEQ as JSON records newer than SEQ, which the log page polls."""
import collections
import logging
import time

from aiohttp import web

from lavinmq.http.helpers import HTTPError, require

ADMIN = {"administrator"}
LOG_KEEP = 1000


class MemoryLog(logging.Handler):
    def __init__(self, keep=LOG_KEEP):
        super().__init__()
        self.records = collections.deque(maxlen=keep)
        self.seq = 0

    def emit(self, record):
        try:
            msg = record.getMessage()
            if record.exc_info:
                msg += "\n" + logging.Formatter().formatException(record.exc_info)
        except Exception:      # a bad format string must not break logging
            msg = str(record.msg)
        self.seq += 1
        self.records.append((self.seq, record.created, record.levelname, record.name, msg))


_handler = None


def install():
    """Attach the handler to the `lavinmq` logger once (not to the root,
    whose handlers cli.setup_logging replaces)."""
    global _handler
    if _handler is None:
        _handler = MemoryLog()
        logging.getLogger("lavinmq").addHandler(_handler)
    return _handler


def _iso(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


async def get_logs(request):
    require(request, ADMIN)
    records = list(install().records)
    after = request.query.get("after")
    if after is not None:
        try:
            seq = int(after)
        except ValueError:
            raise HTTPError(400, "after must be an integer")
        return web.json_response([{"seq": s, "timestamp": _iso(ts), "level": lvl, "logger": name,
                                   "message": msg} for s, ts, lvl, name, msg in records if s > seq])
    text = "".join(f"{_iso(ts)} {lvl} {name}: {msg}\n" for _, ts, lvl, name, msg in records)
    return web.Response(text=text, content_type="text/plain",
                        headers={"Content-Disposition": "attachment; filename=lavinmq.log"})


def add_routes(app):
    app.router.add_get("/api/logs", get_logs)
