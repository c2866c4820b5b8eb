"""Issue 25 finding 1: after a frame-size error, before any login, the
reader kept re-reading the same oversize header during the 3 s close-ok
wait, never consumed it and doubled its buffer on every read: one socket
streaming zeros behind a 0xFFFFFFF0 header took the broker from 65 MB to
1.2 GB in 0.9 s, and logged a line per read."""
import socket
import struct
import threading
import time

import pika


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _stream_zeros(sock, seconds, sent):
    chunk = bytes(1 << 16)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            sock.sendall(chunk)
            sent[0] += len(chunk)
    except OSError:
        pass            # the broker closed the socket: what it should do in the end


def test_oversize_frame_header_then_a_stream_of_zeros(make_broker):
    b = make_broker()
    before = rss_mb(b.proc.pid)
    log_lines_before = len(b.log_text().splitlines())
    socks, threads, sent = [], [], [0]
    for _ in range(2):
        s = socket.create_connection((b.host, b.port))
        s.sendall(b"AMQP\x00\x00\x09\x01" + struct.pack(">BHI", 1, 0, 0xFFFFFFF0))
        socks.append(s)
        t = threading.Thread(target=_stream_zeros, args=(s, 2.0, sent))
        t.start()
        threads.append(t)
    peak = before
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_mb(b.proc.pid))
        time.sleep(0.05)
    for t in threads:
        t.join()
    # (the broker stops reading such a socket: the sender blocks once the buffers are full)
    assert sent[0] > 1 << 20, f"only {sent[0]} bytes went out: the attack did not run"
    assert peak - before < 60, f"RSS grew from {before:.0f} MB to {peak:.0f} MB"
    # the error is answered (connection.close 501, FRAME_ERROR) and the socket closed
    for s in socks:
        s.settimeout(6)
        got = b""
        try:
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                got += data
        except (ConnectionResetError, socket.timeout):
            pass
        assert b"\x00\x0a\x00\x32\x01\xf5" in got, got[:200]   # connection.close, reply code 501
        s.close()
    new_lines = b.log_text().splitlines()[log_lines_before:]
    assert len(new_lines) < 20, f"{len(new_lines)} log lines for two bad frames:\n" + "\n".join(new_lines[:20])
    # and a client that logs in is served
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    conn.channel().queue_declare("", exclusive=True)
    conn.close()


def test_connection_error_mid_batch_consumes_what_was_read(make_broker):
    """A connection-level error in the middle of a batch (here a heartbeat
    frame on channel 1) must not leave the batch in the buffer to be parsed
    again, and fail again, at every later read."""
    b = make_broker()
    s = socket.create_connection((b.host, b.port))
    s.sendall(b"AMQP\x00\x00\x09\x01")
    # a heartbeat on channel 1 is an unexpected frame (505, as LavinMQ), then good heartbeats
    bad = b"\x08\x00\x01\x00\x00\x00\x00\xce"
    beat = b"\x08\x00\x00\x00\x00\x00\x00\xce"
    s.sendall(bad + beat * 1000)
    for _ in range(50):
        s.sendall(beat * 1000)
        time.sleep(0.01)
    s.settimeout(6)
    got = b""
    try:
        while True:
            data = s.recv(1 << 16)
            if not data:
                break
            got += data
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert got.count(b"\x00\x0a\x00\x32") == 1, got      # one connection.close
    closing = [line for line in b.log_text().splitlines() if "closing" in line and "505" in line]
    assert len(closing) == 1, closing


def test_lost_framing_answers_close_then_end_of_stream_at_once(make_broker):
    """Once framing is lost the broker stops reading the socket (finding 1),
    so it cannot see a close-ok or the client hanging up: it sends
    connection.close 501 and then ends its side of the stream, and a client
    waiting for the end gets it at once, not after the 3 s close timer."""
    b = make_broker()
    s = socket.create_connection((b.host, b.port))
    s.settimeout(5)
    # a heartbeat frame whose frame-end octet is wrong
    s.sendall(b"AMQP\x00\x00\x09\x01" + struct.pack(">BHI", 8, 0, 0) + b"\x00")
    t0 = time.monotonic()
    got = b""
    while data := s.recv(1 << 16):
        got += data
    waited = time.monotonic() - t0
    s.close()
    assert b"\x00\x0a\x00\x32\x01\xf5" in got, got[:200]   # connection.close, reply code 501
    assert waited < 2.0, f"the end of the stream came after {waited:.1f} s"
