"""Many AMQP logins at once over raw sockets (asyncio, one process), for
the login back-off's tests: a guesser with hundreds of parallel sockets,
and timed logins with the right password beside it."""
import asyncio
import time

from pamqp import commands, frame

HEADER = b"AMQP\x00\x00\x09\x01"


def start_ok(user, password):
    return frame.marshal(commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response=f"\0{user}\0{password}"), 0)


async def _read_method(reader):
    """-> (class id, method id) of the next method frame, or None at EOF."""
    try:
        head = await reader.readexactly(7)
        size = int.from_bytes(head[3:7], "big")
        payload = await reader.readexactly(size + 1)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return int.from_bytes(payload[0:2], "big"), int.from_bytes(payload[2:4], "big")


async def login(host, port, user, password, timeout=30.0):
    """-> True (connection.tune came: logged in), False (refused:
    connection.close), None (no answer: closed, or timed out)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        writer.write(HEADER)
        if await asyncio.wait_for(_read_method(reader), timeout) != (10, 10):
            return None
        writer.write(start_ok(user, password))
        answer = await asyncio.wait_for(_read_method(reader), timeout)
        return {(10, 30): True, (10, 50): False}.get(answer)
    except (OSError, asyncio.TimeoutError):
        return None
    finally:
        writer.close()


class Flood:
    """`sockets` coroutines logging in as `user` with wrong passwords, each
    again as soon as it has its answer; `answers` counts the refusals."""

    def __init__(self, host, port, user, sockets):
        self.host, self.port, self.user, self.sockets = host, port, user, sockets
        self.answers = 0
        self.stop = False

    async def _one(self, i):
        n = 0
        while not self.stop:
            n += 1
            if await login(self.host, self.port, self.user, f"guess-{i}-{n}", timeout=15) is False:
                self.answers += 1

    async def run(self, seconds):
        tasks = [asyncio.create_task(self._one(i)) for i in range(self.sockets)]
        await asyncio.sleep(seconds)
        self.stop = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def timed_login(host, port, user, password, timeout=30.0):
    """-> (logged in, seconds it took)."""
    started = time.monotonic()
    ok = await login(host, port, user, password, timeout)
    return ok, time.monotonic() - started
