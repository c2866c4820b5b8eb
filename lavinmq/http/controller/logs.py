"""The broker's recent log in memory, for the UI's log page: the last
LOG_KEEP records of the `lavinmq` loggers (whatever level they pass).
GET /api/logs answers them as text (a download, as LavinMQ's); with
?after=SEQ as JSON records newer than SEQ, which the log page polls.
GET /api/livelog is LavinMQ's server-sent event stream of them: the kept
records, then each new one as it is logged."""
import asyncio
import collections
import logging
import threading
import time

import orjson

from aiohttp import web

from lavinmq.http.helpers import HTTPError, require

ADMIN = {"administrator"}
LOG_KEEP = 1000
MAX_LIVE = 16           # livelog streams open at once
LIVE_BACKLOG = 1000     # records a slow livelog reader may fall behind before it is dropped
# LavinMQ's severity names
SEVERITY = {"TRACE": "trace", "DEBUG": "debug", "INFO": "info", "NOTICE": "notice", "WARNING": "warn",
            "ERROR": "error", "CRITICAL": "fatal"}


class MemoryLog(logging.Handler):
    def __init__(self, keep=LOG_KEEP):
        super().__init__()
        self.listeners = set()      # asyncio.Queue of each /api/livelog stream
        self.loop = None
        self.loop_thread = None
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
        entry = (self.seq, record.created, record.levelname, record.name, msg)
        self.records.append(entry)
        if self.listeners:
            if threading.get_ident() == self.loop_thread:
                self._fan_out(entry)
            else:       # a worker thread logged: the queues belong to the loop
                self.loop.call_soon_threadsafe(self._fan_out, entry)

    def listen(self, queue):
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.listeners.add(queue)

    def _fan_out(self, entry):
        for q in list(self.listeners):
            try:
                q.put_nowait(entry)
            except asyncio.QueueFull:
                self.listeners.discard(q)       # too slow: its stream ends


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


def _event(entry):
    _, ts, level, name, msg = entry
    data = orjson.dumps([SEVERITY.get(level, level.lower()), name, msg]).decode()
    return f"id: {int(ts * 1000)}\ndata: {data}\n\n".encode()


async def livelog(request):
    """LavinMQ's GET /api/livelog (text/event-stream): "id: <ms>" and
    "data: [severity, source, message]" per record; a reconnecting
    EventSource's Last-Event-Id skips what it has seen."""
    require(request, ADMIN)
    handler = install()
    if len(handler.listeners) >= MAX_LIVE:
        raise HTTPError(503, f"at most {MAX_LIVE} live logs at once")
    try:
        last = int(request.headers.get("Last-Event-Id", "-1"))
    except ValueError:
        last = -1
    queue = asyncio.Queue(LIVE_BACKLOG)
    handler.listen(queue)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                       "X-Accel-Buffering": "no"})
    try:
        await resp.prepare(request)
        for entry in list(handler.records):
            if int(entry[1] * 1000) > last:
                await resp.write(_event(entry))
        while queue in handler.listeners or not queue.empty():
            try:
                entry = await asyncio.wait_for(queue.get(), 15)
            except TimeoutError:
                await resp.write(b": keep-alive\n\n")     # finds a reader that has gone
                continue
            await resp.write(_event(entry))
    except ConnectionResetError:
        pass
    finally:
        handler.listeners.discard(queue)
    return resp


def add_routes(app):
    app.router.add_get("/api/logs", get_logs)
    app.router.add_get("/api/livelog", livelog)
