"""LavinMQ's [main] tuning keys on a real broker (once accepted and
ignored): tcp_keepalive and the TCP buffer sizes on accepted AMQP and MQTT
sockets, read from the server's side with `ss`; free_disk_warn,
consumer_timeout_loop_interval, max_deleted_definitions; a bad value stops
the start naming the key. tcp_nodelay is checked in
tests/unit/test_sockopts.py (ss does not show it)."""
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pika
import pytest

from tests.conftest import BrokerProcess, unique


def local_address():
    """An address of this machine that is not loopback (keepalive is only
    set for such peers, as LavinMQ does), or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))         # no packet is sent: this only picks the route's source
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def accepted(local_port, peer_port):
    """ss's lines of the server's side of one connection (local_port is the
    broker's, peer_port the client's)."""
    out = subprocess.run(["ss", "-tnoiem", "state", "established",
                          f"( sport = :{local_port} and dport = :{peer_port} )"],
                         capture_output=True, text=True, timeout=10).stdout
    blocks = re.split(r"\n(?=\S)", out.strip())
    found = [b for b in blocks[1:] if f":{local_port} " in b]        # the first is the header
    assert len(found) == 1, out
    return found[0]


def settled(local_port, peer_port):
    """accepted() once the socket is idle: ss shows one timer, and while a
    segment awaits its ACK that is the retransmit timer, not keepalive's."""
    deadline = time.monotonic() + 3
    while True:
        block = accepted(local_port, peer_port)
        if "timer:(on," not in block or time.monotonic() > deadline:
            return block
        time.sleep(0.1)


def skmem(block, field):
    return int(re.search(rf"[(,]{field}(\d+)", block).group(1))


def keepalive_timer(block):
    m = re.search(r"timer:\(keepalive,(?:(\d+)min)?(\d+(?:\.\d+)?)(m?s)", block)
    if m is None:
        return None
    minutes, value, unit = m.groups()
    seconds = float(value) / (1000 if unit == "ms" else 1)
    return seconds + 60 * int(minutes or 0)


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_tcp_options_on_accepted_amqp_and_mqtt_sockets(tmp_path):
    addr = local_address()
    if addr is None:
        pytest.skip("no non-loopback address on this machine")
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\ntcp_keepalive = 25:7:4\ntcp_recv_buffer_size = 65536\n"
                   "tcp_send_buffer_size = 98304\n")
    b = BrokerProcess(tmp_path / "data", mqtt=True, extra_args=[
        "-c", str(ini), "--mqtt-bind", addr, "--default-user-only-loopback", "false", "--loopback-users", ""])
    b.host = addr           # AMQP (and the client) on the machine's own address: not loopback
    b.url = f"amqp://guest:guest@{addr}:{b.port}/%2F"
    b.start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare(unique("q"), exclusive=True)      # the options leave the connection working
        client_port = conn._impl._transport._sock.getsockname()[1]
        block = settled(b.port, client_port)
        idle = keepalive_timer(block)
        assert idle is not None and 15 < idle <= 25, block      # 25 s idle (the default would be 60)
        # SO_RCVBUF/SO_SNDBUF as set; the kernel doubles them (its bookkeeping)
        assert skmem(block, "rb") == 2 * 65536 and skmem(block, "tb") == 2 * 98304, block
        # MQTT: the same options at accept, before a packet is read
        with socket.create_connection((addr, b.mqtt_port)) as raw:
            time.sleep(0.3)
            block = settled(b.mqtt_port, raw.getsockname()[1])
            assert keepalive_timer(block) is not None and skmem(block, "rb") == 2 * 65536, block
        conn.close()
    finally:
        b.stop()


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_loopback_clients_get_no_keepalive_but_the_buffer_sizes(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\ntcp_keepalive = 25:7:4\ntcp_recv_buffer_size = 49152\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        with socket.create_connection(("127.0.0.1", b.port)) as raw:
            time.sleep(0.3)
            block = settled(b.port, raw.getsockname()[1])
            assert keepalive_timer(block) is None, block       # LavinMQ's rule: not for loopback peers
            assert skmem(block, "rb") == 2 * 49152, block      # not the kernel's default 131072
        # SIGHUP: sockets accepted from then on get the file's new options
        ini.write_text("[main]\ntcp_recv_buffer_size = 40960\n")
        b.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while "config reloaded" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", b.port)) as raw:
            time.sleep(0.3)
            assert skmem(settled(b.port, raw.getsockname()[1]), "rb") == 2 * 40960
    finally:
        b.stop()


def test_bad_value_stops_the_start_naming_the_key(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\ntcp_keepalive = 60:10:lots\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)])
    with pytest.raises(RuntimeError, match="exited") as info:
        b.start(timeout=20)
    assert f"{ini}: [main] tcp_keepalive: '60:10:lots': count 'lots' is not an integer" in str(info.value)
    ini.write_text("[main]\nsocket_buffer_size = 32768\n")
    with pytest.raises(RuntimeError, match="exited") as info:
        b.start(timeout=20)
    assert "[main] socket_buffer_size = 32768: not supported by this broker" in str(info.value)


def test_free_disk_warn_logs_a_warning(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    # more than any disk has free; the alarm itself off, so publishers stay unblocked
    ini.write_text(f"[main]\nfree_disk_warn = {2 ** 62}\nfree_disk_min = 0\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        deadline = time.monotonic() + 5
        while "low on disk space" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = b.log_text()
        assert re.search(rf"WARNING.*low on disk space: \d+ bytes free in .*, below {2 ** 62} \(free_disk_warn\)",
                         log), log
        assert log.count("low on disk space") == 1         # once on the way down, not every second
        assert "has no effect" not in log
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.confirm_delivery()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"still published")         # a warning, not an alarm
        conn.close()
    finally:
        b.stop()


def test_consumer_timeout_loop_interval(tmp_path):
    """Timeouts are acted on at the checks, every 2 s here: a channel
    whose delivery timed out right after a check is closed at the next one,
    2 s later (1 s with the default)."""
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nconsumer_timeout = 100\nconsumer_timeout_loop_interval = 2\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        q = conn.channel().queue_declare(unique("q"), auto_delete=False).method.queue

        def hold_one():
            """-> seconds from a delivery (never acked) to its channel's close"""
            ch = conn.channel()
            ch.basic_publish("", q, b"x")
            got = []
            ch.basic_consume(q, lambda c, m, p, body: got.append(time.monotonic()))
            deadline = time.monotonic() + 10
            while not ch.is_closed and time.monotonic() < deadline:
                conn.process_data_events(0.02)
            assert ch.is_closed and got
            return time.monotonic() - got[0]

        hold_one()          # closed at a check: the next check is 2 s after it
        gap = hold_one()
        assert 1.3 < gap < 3.0, gap      # with checks every second it would be under 1 s
        conn.close()
    finally:
        b.stop()


def test_max_deleted_definitions_compacts_the_file(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nmax_deleted_definitions = 10\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    path = os.path.join(b.data_dir, hashlib.sha1(b"/").hexdigest(), "definitions.amqp")
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare("kept", durable=True)
        start = os.path.getsize(path)
        sizes = []
        for i in range(10):
            ch.queue_declare(f"gone{i}", durable=True)
            ch.queue_delete(f"gone{i}")
            sizes.append(os.path.getsize(path))
        # nine removals appended; the tenth rewrote the file with what is declared now
        assert sizes[8] > start + 9 * 40 and sizes[9] == start, (start, sizes)
        conn.close()
    finally:
        b.stop()
    b.start()       # the compacted file replays
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        conn.channel().queue_declare("kept", passive=True)
        conn.close()
    finally:
        b.stop()
