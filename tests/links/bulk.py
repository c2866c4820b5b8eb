"""Many messages in and out of a queue fast (pika is too slow for the
kill and speed tests): bodies are numbers, so that what arrives can be
checked for losses and counted for duplicates."""
import collections
import struct

from pamqp import commands

from tests.helpers.rawclient import RawClient, publish_frames


def body(i):
    return b"%08d" % i


def fill(b, queue, n, start=0, chunk=20_000, exchange=None):
    """n persistent messages (bodies start..start+n-1) in a durable queue
    (or published to an exchange with the queue's name as routing key),
    all confirmed when this returns."""
    c = RawClient(b.host, b.port)
    c.open_channel(1)
    if exchange is None:
        c.send(1, commands.Queue.Declare(queue=queue, durable=True))
        c.expect(commands.Queue.DeclareOk)
    c.send(1, commands.Confirm.Select())
    c.expect(commands.Confirm.SelectOk)
    template = publish_frames(1, exchange or "", queue, body(0), commands.Basic.Properties(delivery_mode=2))
    head = template[:-9]        # the body frame ends the message: 8 bytes of body, then frame-end
    for first in range(start, start + n, chunk):
        c.sendall(b"".join(head + body(i) + b"\xce" for i in range(first, min(first + chunk, start + n))))
    confirmed = 0
    while confirmed < n:
        _, f = c.read_frame()
        if isinstance(f, commands.Basic.Ack):
            confirmed = f.delivery_tag
        elif isinstance(f, commands.Basic.Nack):
            raise AssertionError(f"the broker refused publish {f.delivery_tag}")
    c.close()


def take_all(b, queue, idle=1.0):
    """Every message in the queue (acked), as a Counter of bodies; stops
    once nothing has come for `idle` seconds after the count declared."""
    c = RawClient(b.host, b.port)
    c.open_channel(1)
    c.send(1, commands.Queue.Declare(queue=queue, passive=True))
    expected = c.expect(commands.Queue.DeclareOk).message_count
    c.send(1, commands.Basic.Qos(prefetch_count=0))
    c.expect(commands.Basic.QosOk)
    c.send(1, commands.Basic.Consume(queue=queue, no_ack=True))
    c.expect(commands.Basic.ConsumeOk)
    c.sock.settimeout(idle)
    got = collections.Counter()
    buf = c.buf
    total = 0
    try:
        while True:
            try:
                data = c.sock.recv(1 << 20)
            except TimeoutError:
                if total >= expected:
                    break
                raise AssertionError(f"{total} of {expected} messages came") from None
            if not data:
                raise AssertionError("the broker closed the connection")
            buf += data
            pos, n = 0, len(buf)
            while n - pos >= 7:
                size = struct.unpack_from(">I", buf, pos + 3)[0]
                if n - pos < size + 8:
                    break
                if buf[pos] == 3:
                    got[buf[pos + 7:pos + 7 + size]] += 1
                    total += 1
                pos += size + 8
            buf = buf[pos:]
    finally:
        c.close()
    return got


def losses_and_duplicates(got, n, start=0):
    lost = sum(1 for i in range(start, start + n) if got[body(i)] == 0)
    duplicates = sum(count - 1 for count in got.values() if count > 1)
    extra = sum(1 for k in got if not (k.isdigit() and start <= int(k) < start + n))
    return lost, duplicates, extra
