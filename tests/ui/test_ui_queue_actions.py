"""A queue page's actions that LavinMQ's UI has: "Move messages" (a
shovel that deletes itself once the queue's messages are moved), "Restart
queue" on a closed queue, and a stream page's "Copy messages" (the stream
keeps its messages), driven in the browser against real brokers."""
import hashlib
import os
import socket
import time
import urllib.parse

import pika

from tests.conftest import unique
from tests.ui.conftest import api, start_broker


def q(s):
    return urllib.parse.quote(s, safe="")


def wait_until(fn, timeout=15):
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def messages(broker, name):
    return api(broker, "GET", f"/api/queues/%2F/{q(name)}")[1]["messages"]


def publish(broker, queue, count, arguments=None):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments=arguments)
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", queue, b"m%05d" % i + b"x" * 200, pika.BasicProperties(delivery_mode=2))
    conn.close()


def test_move_and_copy_messages(ui, ui_broker):
    src, dest, stream, copies = unique("ui-src"), unique("ui dest/é"), unique("ui-stream"), unique("ui-copies")
    publish(ui_broker, src, 7)
    publish(ui_broker, dest, 0)
    publish(ui_broker, stream, 4, {"x-queue-type": "stream"})
    publish(ui_broker, copies, 0)
    try:
        ui.login()
        ui.go(f"#/queue/%2F/{q(src)}", "#queue-stats .stat")
        ui.page.click("#move-box summary")
        ui.page.fill("#move-messages input[name=destination]", dest)
        ui.page.click("#move-messages button[type=submit]")
        ui.page.locator(".toast", has_text=f"Moving messages to {dest}").wait_for()
        wait_until(lambda: messages(ui_broker, dest) == 7 and messages(ui_broker, src) == 0)
        # the shovel deleted itself (src-delete-after queue-length)
        wait_until(lambda: api(ui_broker, "GET", "/api/parameters/shovel/%2F")[1] == [])
        ui.shot("queue-move")

        ui.go(f"#/stream/%2F/{q(stream)}", "#stream-stats .stat")
        ui.page.click("#copy-box summary")
        ui.page.fill("#copy-messages input[name=destination]", copies)
        ui.page.click("#copy-messages button[type=submit]")
        ui.page.locator(".toast", has_text=f"Copying messages to {copies}").wait_for()
        wait_until(lambda: messages(ui_broker, copies) == 4)
        assert messages(ui_broker, stream) == 4
        wait_until(lambda: api(ui_broker, "GET", "/api/parameters/shovel/%2F")[1] == [])
        ui.shot("stream-copy")
    finally:
        for name in (src, dest, stream, copies):
            api(ui_broker, "DELETE", f"/api/queues/%2F/{q(name)}")


def http_up(b):
    try:
        socket.create_connection((b.host, b.http_port), timeout=0.5).close()
        return True
    except OSError:
        return False


def queue_dir(b, name):
    h = lambda s: hashlib.sha1(s.encode()).hexdigest()     # noqa: E731
    return os.path.join(b.data_dir, h("/"), h(name))


def test_restart_a_closed_queue(ui_factory, tmp_path):
    """A sealed segment holding bytes no writer produced closes its queue at
    boot; once the operator puts it back, "Restart queue" opens it again."""
    b = start_broker(tmp_path / "data", main_settings="segment_size = 16384\n")
    try:
        name = unique("ui-damaged")
        publish(b, name, 300)
        assert b.stop() == 0
        seg = os.path.join(queue_dir(b, name), "msgs.0000000002")
        with open(seg, "rb") as f:
            good = f.read()
        with open(seg, "r+b") as f:
            f.seek(5000)
            f.write(b"\xff" * 8 + b"\x00" * 500)
        b.start()
        wait_until(lambda: http_up(b))
        assert api(b, "GET", f"/api/queues/%2F/{q(name)}")[1]["state"] == "closed"
        with open(seg, "wb") as f:
            f.write(good)
        ui = ui_factory(broker=b)
        ui.login()
        ui.go(f"#/queue/%2F/{q(name)}", "#queue-stats .stat")
        assert ui.page.locator("#pause").count() == 0      # a closed queue is restarted, not paused
        ui.shot("queue-closed")
        ui.page.click("#restart")
        ui.page.locator(".toast", has_text="Queue restarted.").wait_for()
        ui.page.locator("#pause").wait_for()
        assert ui.page.locator("#restart").count() == 0
        q_now = api(b, "GET", f"/api/queues/%2F/{q(name)}")[1]
        assert q_now["state"] == "running" and q_now["messages"] == 300
    finally:
        b.stop()
