"""Issue 14 item 4: running out of descriptors pauses accepting and delays
confirms; it never closes a listener or stops the broker (before, uvloop
closed the listener on EMFILE and a failed open() in the flush stopped the
broker)."""
import asyncio
import errno
import os
import resource
import socket

from lavinmq import listener as listener_mod, sync
from lavinmq.listener import ConnectionGuard, Listener


class FlakyListeningSocket:
    """A real listening socket whose accept() fails with EMFILE `fail` times."""

    def __init__(self, fail):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.fail = fail

    def accept(self):
        if self.fail:
            self.fail -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self.sock.accept()

    def fileno(self):
        return self.sock.fileno()

    def getsockname(self):
        return self.sock.getsockname()

    def close(self):
        self.sock.close()


class Proto(asyncio.Protocol):
    made = []

    def connection_made(self, transport):
        Proto.made.append(transport)

    def connection_lost(self, exc):
        self.ticket.release()


async def test_emfile_on_accept_pauses_then_accepts(monkeypatch):
    monkeypatch.setattr(listener_mod, "ACCEPT_RETRY_DELAY", 0.1)
    flaky = FlakyListeningSocket(fail=3)
    guard = ConnectionGuard(10, 10)
    lst = Listener([flaky], Proto, guard, "test")
    lst.start()
    loop = asyncio.get_running_loop()
    port = flaky.getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(100):
        if Proto.made:
            break
        await asyncio.sleep(0.02)
    assert Proto.made, "the listener stopped accepting after EMFILE"
    assert not lst.closed and not lst.paused and flaky.fail == 0
    assert guard.total == 1
    Proto.made[0].close()
    writer.close()
    await asyncio.sleep(0.05)
    assert guard.total == 0
    lst.close()
    assert loop.is_running()


async def test_flush_out_of_descriptors_retries_instead_of_stopping(tmp_path, monkeypatch):
    # the flusher's threads really run out: the process's descriptor limit
    # is lowered to what is open now, so their open() fails with EMFILE
    killed = []
    monkeypatch.setattr(sync.os, "kill", lambda pid, sig: killed.append(sig))
    path = tmp_path / "f"
    path.write_bytes(b"x")
    syncer = sync.Syncer(str(tmp_path))
    syncer.add_file(str(path))
    first = asyncio.Event()
    syncer.after_flush(first.set)       # a flush that works: the flusher is set up
    await asyncio.wait_for(first.wait(), 5)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    probe = os.dup(0)
    os.close(probe)
    resource.setrlimit(resource.RLIMIT_NOFILE, (probe, hard))
    try:
        syncer.add_file(str(path))
        done = asyncio.Event()
        syncer.after_flush(done.set)
        for _ in range(250):
            if syncer.retry is not None:
                break
            await asyncio.sleep(0.02)
        assert syncer.retry is not None and not done.is_set(), "the flush did not wait for descriptors"
        assert syncer.retry[0] == [str(path)]       # the same file, to flush again
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    await asyncio.wait_for(done.wait(), 5)
    assert killed == []
    assert syncer.idle and syncer.flushes == 3
