"""Hostile clients over real sockets against a real broker process, while a
well-behaved pika client publishes and consumes in parallel: the broker
must keep serving it, answer the fuzzers with spec replies, and log no
traceback."""
import os
import random
import socket
import threading

import pika

from tests.fuzz.corpus import case
from tests.fuzz.runner import HANDSHAKE, check_output

CASES = int(os.environ.get("FUZZ_SOCKET_CASES", "1000"))


def hostile(broker, seed, n, problems):
    for i in range(n):
        rng = random.Random(f"sock:{seed}:{i}")
        s = socket.create_connection((broker.host, broker.port), timeout=10)
        out = b""
        try:
            s.sendall(HANDSHAKE)
            for chunk in case(rng):
                s.sendall(chunk)
            s.shutdown(socket.SHUT_WR)
            while data := s.recv(65536):
                out += data
        except socket.timeout:
            problems.append((seed, i, "broker neither answered nor closed in 10 s"))
        except OSError:
            pass        # the broker closed on us (reset, broken pipe): allowed, we check what it said
        except Exception as exc:
            problems.append((seed, i, repr(exc)))
        finally:
            s.close()
        problem = check_output(out[len(b"AMQP"):] if out.startswith(b"AMQP") else out)
        if problem:
            problems.append((seed, i, problem))


def test_hostile_clients_do_not_disturb_a_healthy_one(fresh_broker):
    problems = []
    threads = [threading.Thread(target=hostile, args=(fresh_broker, k, CASES // 2, problems))
               for k in range(2)]
    for t in threads:
        t.start()
    conn = pika.BlockingConnection(pika.URLParameters(fresh_broker.url))
    ch = conn.channel()
    ch.queue_declare("healthy")
    ch.confirm_delivery()
    sent = got = 0
    while any(t.is_alive() for t in threads) or sent < 200:
        ch.basic_publish("", "healthy", b"m%d" % sent)
        sent += 1
        m = ch.basic_get("healthy", auto_ack=True)
        if m[0] is not None:
            assert m[2] == b"m%d" % got
            got += 1
    for t in threads:
        t.join()
    while (m := ch.basic_get("healthy", auto_ack=True))[0] is not None:
        assert m[2] == b"m%d" % got
        got += 1
    conn.close()
    assert got == sent
    assert not problems, problems[:5]
    assert fresh_broker.proc.poll() is None
    fresh_broker.check_clean()
