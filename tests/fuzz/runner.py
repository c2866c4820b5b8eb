"""Feed fuzz cases to the broker's real connection code in-process (no
sockets, so ~thousands of cases per second) and check what it answers.

A case passes when no exception escapes the read callback, nothing is
logged with a traceback, every frame the broker writes is well formed, and
any connection.close/channel.close carries a spec reply code other than
541 INTERNAL_ERROR (which is what an unexpected exception turns into).
Every so often a well-behaved client checks the server still serves.

Long run:  python -m tests.fuzz.runner --cases 1000000 [--seed N]
"""
import argparse
import asyncio
import logging
import os
import random
import struct
import sys
import tempfile
import time

from pamqp import commands as C, frame

from lavinmq.amqp.connection import AMQPConnection
from tests.fuzz.corpus import case, marshal
from tests.helpers.inproc import FakeServer, FakeTransport, feed

HANDSHAKE = (b"AMQP\x00\x00\x09\x01"
             + frame.marshal(C.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"), 0)
             + frame.marshal(C.Connection.TuneOk(2048, 4096, 0), 0)
             + frame.marshal(C.Connection.Open("/"), 0)
             + frame.marshal(C.Channel.Open(), 1))
SPEC_CODES = {200, 311, 312, 313, 320, 402, 403, 404, 405, 406, 501, 502, 503, 504, 505, 506, 530, 540}


class Tracebacks(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(self.format(record))


def check_output(data):
    """-> a problem with the broker's output, or None."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 8:
            return f"truncated frame at {pos}"
        ftype, ch, size = struct.unpack_from(">BHI", data, pos)
        end = pos + 7 + size
        if end >= len(data) or data[end] != 0xCE:
            return f"bad frame end at {pos}"
        if ftype not in (1, 2, 3, 8):
            return f"frame type {ftype}"
        if ftype == 1 and size >= 6:
            cls, meth, code = struct.unpack_from(">HHH", data, pos + 7)
            if (cls, meth) in ((10, 50), (20, 40)) and code not in SPEC_CODES:
                text_len = data[pos + 13] if size > 6 else 0
                text = data[pos + 14:pos + 14 + text_len].decode(errors="replace")
                return f"close with reply code {code}: {text}"
        pos = end + 1
    return None


async def healthy_client(server, i):
    conn = AMQPConnection(server)
    t = FakeTransport()
    conn.connection_made(t)
    q = f"healthy-{i}"
    feed(conn, HANDSHAKE + marshal(C.Queue.Declare(queue=q), 1)
         + b"".join(_publish(q, b"ok %d" % i)) + marshal(C.Basic.Get(queue=q, no_ack=True), 1)
         + marshal(C.Queue.Delete(queue=q), 1))
    await asyncio.sleep(0)
    conn.connection_lost(None)
    out = bytes(t.out)
    assert b"ok %d" % i in out and check_output(out) is None, "healthy client was not served"


def _publish(q, body):
    from tests.fuzz.corpus import content
    return content(1, "", q, body)


async def run(cases, seed, data_dir, report_every=0):
    catcher = Tracebacks()
    logger = logging.getLogger("lavinmq")
    saved = (logger.level, logger.propagate)
    logger.addHandler(catcher)
    logger.setLevel(logging.WARNING)
    logger.propagate = False        # expected warnings would flood the output
    server = FakeServer(data_dir)
    failures = []
    started = time.monotonic()
    try:
        for i in range(cases):
            rng = random.Random(f"{seed}:{i}")
            conn = AMQPConnection(server)
            t = FakeTransport()
            conn.connection_made(t)
            try:
                feed(conn, HANDSHAKE)
                for chunk in case(rng):
                    if t.closed:
                        break
                    feed(conn, chunk)
                await asyncio.sleep(0)      # delivery passes run
                await asyncio.sleep(0)
            except Exception as exc:        # escaped the read callback
                failures.append((i, f"exception {exc!r}"))
            finally:
                conn.connection_lost(None)
            problem = check_output(bytes(t.out))
            if problem:
                failures.append((i, problem))
            if catcher.records:
                failures.append((i, "logged: " + catcher.records[0][-2000:]))
                catcher.records.clear()
            if failures and len(failures) >= 5:
                break
            if i % 500 == 0:
                await healthy_client(server, i)
            if report_every and i and i % report_every == 0:
                rate = i / (time.monotonic() - started)
                print(f"{i} cases, {rate:.0f}/s, {len(failures)} failures", flush=True)
        await healthy_client(server, cases)
    finally:
        for vhost in server.vhosts.values():
            vhost.close()
        logger.removeHandler(catcher)
        logger.level, logger.propagate = saved
    return failures


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1_000_000)
    p.add_argument("--seed", default="1")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        failures = asyncio.run(run(args.cases, args.seed, d, report_every=50_000))
        elapsed = time.monotonic() - t0
    for i, why in failures:
        print(f"case {i} (seed {args.seed}): {why}")
    print(f"{args.cases} cases in {elapsed:.0f} s, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
