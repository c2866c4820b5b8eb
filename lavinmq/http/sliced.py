"""List answers made a slice of the event loop at a time.

A list of every queue is work in proportion to the queues: shaping 4,000
of them into RabbitMQ's JSON took ~60 ms and encoding the 5.7 MB ~50 ms,
while every client of every vhost waited. A `SlicedListing` is an aiohttp
response that does that work in prepare(), where it may await: it shapes
the objects, filters them (lavinmq.http.name_filter), makes the answer and
sends a list answer in chunks, yielding to the loop every SLICE seconds.
Handlers stay synchronous: they return it as they would any response."""
import asyncio
import json
import time

import orjson
from aiohttp import web

from lavinmq import long_work
from lavinmq.http.name_filter import FilterRefused

SLICE = 0.002           # seconds of work between turns of the loop (a second tenant waits about this long)
CHUNK = 128             # list items encoded at a time


async def sliced_map(objects, fn):
    """[fn(o) for o in objects], a slice at a time."""
    out = []
    deadline = time.perf_counter() + SLICE
    for i, obj in enumerate(objects):
        out.append(fn(obj))
        if not i & 7 and time.perf_counter() > deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + SLICE
    return out


def dumps(value):
    try:
        return orjson.dumps(value)
    except TypeError:
        # names that are not UTF-8 hold lone surrogates, which orjson
        # refuses: the json module escapes them (\udcff)
        return json.dumps(value).encode()


class SlicedListing(web.StreamResponse):
    """`objects`, shaped by `shape` (None: already shaped), kept by
    `select` (None, or an async function of the list), and made into the
    answer by `make(kept)` (a JSON value; the request was checked before).
    make=None: the answer is the shaped list as it is, shaped and sent a
    chunk at a time without holding it all (thousands of shaped objects
    kept across turns of the loop made the garbage collector walk them)."""

    def __init__(self, objects, shape, select, make):
        super().__init__()
        self._job = (objects, shape, select, make)

    async def prepare(self, request):
        with long_work.running():       # the fsync threads get the GIL between our slices
            return await self._prepare(request)

    async def _prepare(self, request):
        objects, shape, select, make = self._job
        self._job = None
        if make is None:
            return await self._stream(request, objects, shape)
        status = 200
        try:
            items = objects if shape is None else await sliced_map(objects, shape)
            if select is not None:
                items = await select(items)
            payload = make(items)
        except FilterRefused as exc:
            status, payload = 400, {"error": "bad_request", "reason": str(exc)}
        self.set_status(status)
        self.content_type = "application/json"
        writer = await super().prepare(request)
        if isinstance(payload, list):
            await self.write(b"[")
            deadline = time.perf_counter() + SLICE
            for start in range(0, len(payload), CHUNK):
                chunk = dumps(payload[start:start + CHUNK])[1:-1]       # the items, without [ ]
                await self.write((b"," if start else b"") + chunk)
                if time.perf_counter() > deadline:
                    await asyncio.sleep(0)
                    deadline = time.perf_counter() + SLICE
            await self.write(b"]")
        else:
            await self.write(dumps(payload))
        return writer

    async def _stream(self, request, objects, shape):
        self.content_type = "application/json"
        writer = await super().prepare(request)
        sep = b"["              # before the first chunk, then ","
        chunk = []
        deadline = time.perf_counter() + SLICE
        for obj in objects:
            chunk.append(shape(obj))
            late = time.perf_counter() > deadline
            if len(chunk) >= CHUNK or late:
                await self.write(sep + dumps(chunk)[1:-1])
                sep, chunk = b",", []
                if late:
                    await asyncio.sleep(0)
                    deadline = time.perf_counter() + SLICE
        if chunk:
            await self.write(sep + dumps(chunk)[1:-1])
            sep = b","
        await self.write(b"[]" if sep == b"[" else b"]")
        return writer
