"""Runs the broker in this process with the allocation counter installed,
and answers 'count' on stdin with the number of Python object allocations
since start. Used by tests/integration/test_no_objects_per_message.py."""
import asyncio
import sys

from lavinmq._core import debug
from lavinmq.config import Config
from lavinmq.server import Server


async def main(argv):
    config = Config.load(argv)
    server = Server(config)
    await server.start()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    debug.count_allocations()
    print("ready", flush=True)
    while True:
        line = await reader.readline()
        if not line or line.strip() == b"quit":
            break
        if line.strip() == b"count":
            print(debug.allocations(), flush=True)
    await server.stop()


if __name__ == "__main__":
    import uvloop
    uvloop.run(main(sys.argv[1:]))
