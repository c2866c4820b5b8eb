"""A full disk is an error on the write path, never a signal: publishes
are nacked (or the connection closed with 506 for publishers without
confirms), confirmed messages stay readable, the broker starts on a full
disk and serves consumers, and publishing resumes when space returns.

The data directory lives on a small tmpfs that the test mounts (root only;
CI runs as root)."""
import os
import subprocess

import pika
import pytest

from tests.conftest import BrokerProcess, unique

MiB = 1024 * 1024
BODY = os.urandom(60 * 1024)


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the disk-full tests need root to mount a tmpfs")
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path, leave):
    """Take all but `leave` bytes of the filesystem with a filler file."""
    filler = os.path.join(path, "filler")
    with open(filler, "ab") as f:
        while free_bytes(path) > leave:
            try:
                f.write(b"\0" * min(MiB, max(4096, free_bytes(path) - leave)))
                f.flush()
            except OSError:
                break
    return filler


def start_broker(mnt, tmp_path):
    ini = tmp_path / "lavinmq.ini"
    # no disk alarm: these tests are about the last line of defence
    ini.write_text("[main]\nfree_disk_min = 0\nsegment_size = 1048576\n")
    b = BrokerProcess(mnt / "data", extra_args=["-c", str(ini)])
    b.log_path = str(tmp_path / "broker.log")     # the log must not need the full disk
    return b.start()


def publish_until_nacked(b, queue, limit=2000):
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    confirmed = 0
    for i in range(limit):
        try:
            ch.basic_publish("", queue, b"%06d" % i + BODY, pika.BasicProperties(delivery_mode=2))
        except pika.exceptions.NackError:
            break
        confirmed += 1
    else:
        pytest.fail("the disk never filled up")
    # the channel stays usable, and the next publish is refused the same way
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", queue, b"again!" + BODY, pika.BasicProperties(delivery_mode=2))
    c.close()
    return confirmed


def drain(b, queue):
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    got = []
    while True:
        m, _, body = ch.basic_get(queue)
        if m is None:
            break
        got.append(body)
        ch.basic_ack(m.delivery_tag)
    c.close()
    return got


def test_full_disk_nacks_keeps_confirmed_and_restarts(small_disk, tmp_path):
    b = start_broker(small_disk, tmp_path)
    queue = unique("full")
    try:
        c = pika.BlockingConnection(pika.URLParameters(b.url))
        c.channel().queue_declare(queue, durable=True)
        c.close()
        filler = fill(small_disk, 6 * MiB)
        confirmed = publish_until_nacked(b, queue)
        assert confirmed > 0
        assert b.proc.poll() is None, b.log_tail()

        # a publisher without confirms learns it with a 506 close
        c = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = c.channel()
        ch.basic_publish("", queue, BODY, pika.BasicProperties(delivery_mode=2))
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
            ch.queue_declare(queue, passive=True)
        assert err.value.reply_code == 506

        # restart on a disk with not one byte free
        b.kill()
        fill(small_disk, 0)
        b.start()
        got = drain(b, queue)
        assert len(got) == confirmed
        assert [g[:6] for g in got] == [b"%06d" % i for i in range(confirmed)]
        assert all(g[6:] == BODY for g in got)

        # space returns: publishing works again
        os.unlink(filler)
        c = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"back", pika.BasicProperties(delivery_mode=2))
        c.close()
        assert drain(b, queue) == [b"back"]
        assert b.stop() == 0
        b.check_clean()
        assert "disk full" in b.log_text()
    finally:
        if b.proc.poll() is None:
            b.kill()
