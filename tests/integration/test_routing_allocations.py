"""The hot-path rule for routing: no Python object per message, whatever
the exchange type, the number of distinct routing keys or header sets, or
CC/BCC headers. The broker counts its Python object allocations while
200k messages flow through each kind of exchange."""
import os
import subprocess
import sys
import threading

from pamqp import commands

from tests.helpers.rawclient import RawClient, publish_frames
from tests.integration.test_no_objects_per_message import consume, free_port

MESSAGES = 200_000
VARIANTS = 1000


def setup(port, declare):
    c = RawClient("127.0.0.1", port)
    c.open_channel(1)
    for method, reply in declare:
        c.send(1, method)
        c.expect(reply)
    c.close()


def flow(port, queue, messages, count):
    """Publish `count` messages cycling over `messages` (frames), consume them."""
    result = []
    t = threading.Thread(target=consume, args=(port, queue, count, result))
    t.start()
    p = RawClient("127.0.0.1", port)
    p.open_channel(1)
    blob = b"".join(messages)
    for _ in range(count // len(messages)):
        p.sendall(blob)
    t.join(timeout=300)
    p.close()
    assert result == [count]


def props(headers):
    return commands.Basic.Properties(headers=headers)


def test_routing_allocates_nothing_per_message(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.alloc_broker", "-D", str(tmp_path), "-p", str(port),
         "--http-port", "0", "--metrics-http-port", "0", "--mqtt-port", "0", "-l", "warning"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

    def count():
        proc.stdin.write("count\n")
        proc.stdin.flush()
        return int(proc.stdout.readline())

    try:
        assert proc.stdout.readline().strip() == "ready"
        declare = [(commands.Queue.Declare(queue=q), commands.Queue.DeclareOk)
                   for q in ("t", "h", "cc", "cc2", "p")]
        declare += [(commands.Exchange.Declare(exchange=x, exchange_type=kind), commands.Exchange.DeclareOk)
                    for x, kind in (("topic", "topic"), ("headers", "headers"), ("direct", "direct"))]
        # a persistent exchange: every message kept and stamped with its x-offset
        declare.append((commands.Exchange.Declare(exchange="persist", exchange_type="topic",
                                                  arguments={"x-persist-messages": 100_000}),
                        commands.Exchange.DeclareOk))
        declare.append((commands.Queue.Bind(queue="p", exchange="persist", routing_key="#"), commands.Queue.BindOk))
        for i in range(999):
            declare.append((commands.Queue.Bind(queue="t", exchange="topic", routing_key=f"dev.{i}.#"),
                            commands.Queue.BindOk))
        declare.append((commands.Queue.Bind(queue="t", exchange="topic", routing_key="#.temp"),
                        commands.Queue.BindOk))
        for i in range(99):
            declare.append((commands.Queue.Bind(queue="h", exchange="headers",
                                                arguments={"dev": str(i), "kind": "temp"}), commands.Queue.BindOk))
        declare.append((commands.Queue.Bind(queue="h", exchange="headers", arguments={"kind": "temp"}),
                        commands.Queue.BindOk))
        declare.append((commands.Queue.Bind(queue="cc", exchange="direct", routing_key="a"), commands.Queue.BindOk))
        declare.append((commands.Queue.Bind(queue="cc2", exchange="direct", routing_key="b"), commands.Queue.BindOk))
        setup(port, declare)
        body = b"0123456789abcdef"
        scenarios = {
            "topic, 1000 bindings": ("t", [publish_frames(1, "topic", f"dev.{i}.temp", body)
                                           for i in range(VARIANTS)]),
            "headers, 100 bindings": ("h", [publish_frames(1, "headers", "", body,
                                                           props({"dev": str(i), "kind": "temp"}))
                                            for i in range(VARIANTS)]),
            # BCC: a second queue, and the record stored without the header
            "CC and BCC": ("cc", [publish_frames(1, "direct", "a", body, props({"BCC": ["b"], "n": i}))
                                  for i in range(VARIANTS)]),
            "persistent exchange": ("p", [publish_frames(1, "persist", f"k.{i}", body, props({"n": i}) if i % 2
                                                         else None) for i in range(VARIANTS)]),
        }
        for name, (queue, messages) in scenarios.items():
            flow(port, queue, messages, 20_000)          # warm-up: caches, buffers, segments
            before = count()
            flow(port, queue, messages, MESSAGES)
            per_message = (count() - before) / MESSAGES
            print(f"\n{name}: {per_message:.4f} allocations per message")
            assert per_message < 0.05, f"{name}: {per_message:.3f} Python objects allocated per message"
    finally:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
