"""Issue 41 row 3: one MQTT subscribe stalled every client. The retained
messages a SUBSCRIBE matched were read from disk, built into records and
stored on the event loop, all before it went on: 5 retained messages of
100 MB and one `#` subscribe stopped AMQP for 7.4 s (50,000 small retained
messages: 4.4 s). Measured here as another tenant's confirmed publishes:
their p99 latency while the subscriber takes the retained messages."""
import json
import os
import subprocess
import sys
import time

import pytest

from tests.mqtt.conftest import Raw, publish_packet, subscribe_packet
from tests.security.conftest import start_broker

VICTIM = r"""
import json, select, sys, time, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.queue_declare("victim-q", durable=True)
ch.confirm_delivery()
print("ready", flush=True)
samples, seq = [], 0
while not select.select([sys.stdin], [], [], 0)[0]:
    seq += 1
    t = time.time()
    ch.basic_publish("", "victim-q", str(seq).encode())     # returns once confirmed
    samples.append((t, time.time() - t))
    time.sleep(0.002)
count = ch.queue_declare("victim-q", durable=True, passive=True).method.message_count
conn.close()
print(json.dumps({"samples": samples, "in_queue": count}), flush=True)
"""


class Victim:
    """Another tenant publishing with confirms, in a process of its own;
    each confirm's latency with the time its publish was sent."""

    def __init__(self, b):
        self.proc = subprocess.Popen([sys.executable, "-c", VICTIM, b.url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self, start, end):
        """-> stats of the confirms of publishes sent between start and end
        (time.time()), and whether every confirmed message is in the queue."""
        out = json.loads(self.proc.communicate("stop\n", timeout=120)[0].strip().splitlines()[-1])
        # a publish sent before the attack and confirmed during it counts too
        lat = sorted(d for t, d in out["samples"] if t + d >= start and t <= end)
        return {"confirmed": len(lat), "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)],
                "max": lat[-1], "all_kept": out["in_queue"] == len(out["samples"])}


def _retain(b, items):
    """items: [(topic, body)] published with the retain flag, then on disk."""
    raw = Raw(b)
    raw.login(client_id="retainer", user="guest", password="guest")
    batch = []
    for topic, body in items:
        batch.append(publish_packet(topic, body, retain=True))
        if sum(map(len, batch)) > 1 << 20 or len(batch) >= 1000:
            raw.send(b"".join(batch))
            batch = []
    raw.send(b"".join(batch))
    raw.close()
    store = None
    for root, dirs, _ in os.walk(b.data_dir):
        if "mqtt_retained_store" in dirs:
            store = os.path.join(root, "mqtt_retained_store")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(store, "index"), "rb") as f:
                if f.read().count(b"\n") == len(items):
                    break
        except (FileNotFoundError, TypeError):
            pass
        time.sleep(0.2)
    time.sleep(1.0)     # the bodies' files are written with the index


def _subscribe_all(b, count, timeout=120):
    """Subscribe to `#` and read until `count` PUBLISH packets came -> seconds."""
    raw = Raw(b)
    raw.login(client_id="reader", user="guest", password="guest")
    started = time.monotonic()
    raw.send(subscribe_packet(1, ("#", 0)))
    s = raw.s
    s.settimeout(timeout)
    buf, skip, publishes = bytearray(raw.buf), 0, 0
    while publishes < count:
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{publishes} of {count} retained messages in {timeout} s")
        if skip:
            n = min(skip, len(buf))
            del buf[:n]
            skip -= n
            if skip:
                buf += s.recv(1 << 20)
                continue
        # a packet's fixed header: type byte, remaining length (varint)
        if len(buf) < 2:
            buf += s.recv(1 << 20)
            continue
        length, mult, i = 0, 1, 1
        while i < len(buf) and i < 5:
            length += (buf[i] & 0x7f) * mult
            mult <<= 7
            i += 1
            if not buf[i - 1] & 0x80:
                break
        else:
            buf += s.recv(1 << 20)
            continue
        if buf[0] >> 4 == 3:
            publishes += 1
        del buf[:i]
        skip = length
    took = time.monotonic() - started
    raw.close()
    return took


def _attack(tmp_path, shape):
    tmp_path.mkdir()
    b = start_broker(tmp_path, mqtt=True)
    try:
        if shape == "5 x 100 MB":
            items = [(f"big/{i}", os.urandom(1 << 16) * 1600) for i in range(5)]
        else:
            items = [(f"small/{i // 1000}/{i}", b"x" * 100) for i in range(50000)]
        _retain(b, items)
        count = len(items)
        del items
        victim = Victim(b)
        time.sleep(0.5)
        start = time.time()
        took = _subscribe_all(b, count)
        stats = victim.stop(start, time.time())
    finally:
        assert b.stop() == 0, b.log_tail()
        b.check_clean()
    print(f"\n{shape}: retained messages read in {took:.1f} s; the other tenant's confirms meanwhile: {stats}")
    assert stats["all_kept"], stats
    return stats


@pytest.mark.timeout(900)
@pytest.mark.parametrize("shape", ["5 x 100 MB", "50,000 x 100 B"])
def test_a_retained_subscribe_does_not_stall_other_tenants(tmp_path, shape):
    """The other tenant's confirms while the retained messages are taken:
    p99 under LAVINMQ_RETAINED_P99_MS (100 ms, the issue's bound), none
    slower than a second (a closed-loop publisher has one sample per stall:
    the 4.4 s one of 50,000 small messages hardly moves a p99). On 2 cores
    shared with other jobs a scheduling hiccup can reach either on its own:
    a run over them runs once more, on a fresh broker, and must keep under
    them then."""
    bound = float(os.environ.get("LAVINMQ_RETAINED_P99_MS", "100")) / 1000
    stats = _attack(tmp_path / "first", shape)
    if stats["p99"] >= bound or stats["max"] >= 1.0:
        stats = _attack(tmp_path / "again", shape)
    assert stats["p99"] < bound and stats["max"] < 1.0, stats


def test_retained_messages_sent_outside_the_queue_are_whole_and_acknowledged(make_broker):
    """What the subscriber gets from the new path: every retained message
    (a mapped 3 MiB body among them) with the retain flag, at QoS 1 with
    packet ids from the session's window (2 here), acknowledged; then the
    live messages as before."""
    b = make_broker("[mqtt]\nmax_inflight_messages = 2\n", mqtt=True)
    big = os.urandom(3 << 20)
    items = [(f"r/{i}", f"body {i}".encode()) for i in range(10)] + [("r/big", big)]
    _retain(b, items)
    raw = Raw(b)
    raw.login(client_id="acker", user="guest", password="guest")
    raw.send(subscribe_packet(1, ("r/#", 1)))
    assert raw.read_packet()[0] == 0x90
    got = {}
    for _ in range(len(items)):
        first, body = raw.read_packet(timeout=30)
        assert first == 0x33, hex(first)        # PUBLISH, QoS 1, retain
        tlen = int.from_bytes(body[:2], "big")
        topic, pid = body[2:2 + tlen].decode(), body[2 + tlen:4 + tlen]
        got[topic] = body[4 + tlen:]
        raw.send(b"\x40\x02" + pid)             # PUBACK: the window has room again
    assert got == dict(items)
    raw.send(publish_packet("r/live", b"live", qos=1, pid=9))
    seen = set()
    while seen != {0x40, 0x32}:
        first, body = raw.read_packet()
        seen.add(first)
        if first == 0x32:
            assert body.endswith(b"live")
    raw.close()
