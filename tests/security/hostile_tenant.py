"""Issue 25 item 4: one tenant attacks, in turn, with everything the
review found; another tenant publishes with confirms all along. What the
second tenant sees (confirm latency, lost messages) is the measure.

Used by tests/security/test_hostile_tenant.py, and on its own to measure a
broker of another tree (the code before the fixes, for the note):

    python -m tests.security.hostile_tenant --seconds 3 [--root /path/to/other/tree] [--fresh]
"""
import argparse
import base64
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from tests.conftest import ROOT, BrokerProcess, free_port

VICTIM = r"""
import json, select, sys, time, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.queue_declare("victim-q", durable=True)
ch.confirm_delivery()
print("ready", flush=True)
lat, seq = [], 0
while not select.select([sys.stdin], [], [], 0)[0]:
    seq += 1
    t = time.monotonic()
    ch.basic_publish("", "victim-q", str(seq).encode())     # returns once confirmed
    lat.append(time.monotonic() - t)
    time.sleep(0.002)
count = ch.queue_declare("victim-q", durable=True, passive=True).method.message_count
conn.close()
lat.sort()
print(json.dumps({"confirmed": len(lat), "in_queue": count, "p50": lat[len(lat) // 2],
                  "p99": lat[int(len(lat) * 0.99)], "max": lat[-1]}), flush=True)
"""


def _http(base, method, path, body=None, user="guest", password="guest", timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()
    except OSError as e:        # a broker that stopped answering (the code before the fixes)
        return None, str(e).encode()


def _until(deadline):
    return time.monotonic() < deadline


def _raw_login(b, user, password, vhost):
    from tests.helpers.rawclient import RawClient
    return RawClient(b.host, b.port, user=user, password=password, vhost=vhost)


# -- the attacks: each runs until its deadline -----------------------------------------------------

def oversize_frame(ctx, deadline):
    """Finding 1: before login, an oversize frame header, then zeros."""
    def one():
        s = socket.create_connection((ctx.b.host, ctx.b.port))
        s.sendall(b"AMQP\x00\x00\x09\x01" + struct.pack(">BHI", 1, 0, 0xFFFFFFF0))
        chunk = bytes(1 << 16)
        try:
            while _until(deadline):
                s.sendall(chunk)
        except OSError:
            pass
        s.close()
    while _until(deadline):
        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def regex_listing(ctx, deadline):
    """Finding 2: a management user's crafted name filter, paged and not."""
    pattern = urllib.parse.quote("(?:[ab]{0,20}a){20}c")
    while _until(deadline):
        for query in ("page=1&page_size=10&", ""):
            _http(ctx.http, "GET", f"/api/queues/hostile?{query}use_regex=true&name={pattern}",
                  user="mallory", password="pw", timeout=max(1, deadline - time.monotonic()))


def metrics_amplification(ctx, deadline):
    """Finding 3: a family named 32 times, on the open metrics port."""
    query = "&".join(["family=queue_coarse_metrics"] * 32)
    while _until(deadline):
        _http(ctx.metrics, "GET", "/metrics/detailed?" + query, user=None,
              timeout=max(1, deadline - time.monotonic()))


def policy_churn(ctx, deadline):
    """Finding 4: a policymaker re-setting a catch-all over thousands of queues."""
    i = 0
    while _until(deadline):
        i += 1
        _http(ctx.http, "PUT", "/api/policies/hostile/churn",
              {"pattern": ".*", "apply-to": "queues", "priority": 50, "definition": {"max-length": 1000 + i}},
              user="mallory", password="pw", timeout=max(1, deadline - time.monotonic()))
    _http(ctx.http, "DELETE", "/api/policies/hostile/churn", user="mallory", password="pw")


def odd_arguments(ctx, deadline):
    """Finding 5: byte-array and decimal arguments, then everyone's listings."""
    c = _raw_login(ctx.b, "mallory", "pw", "hostile")
    c.open_channel(1)
    args = b"\x07x-bytesx\x00\x00\x00\x03\x00\xffa" + b"\x05x-decD\x02\x00\x00\x30\x39"
    payload = struct.pack(">HHHB", 50, 10, 0, 5) + b"odd-q" + b"\x00" + struct.pack(">I", len(args)) + args
    c.sendall(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    c.read_frame()
    while _until(deadline):
        for path in ("/api/queues", "/api/exchanges", "/api/definitions"):
            _http(ctx.http, "GET", path, timeout=max(1, deadline - time.monotonic()))
    c.close()


def login_guessing(ctx, deadline):
    """Finding 7: guessing alice's password over AMQP and HTTP."""
    def amqp():
        n = 0
        while _until(deadline):
            n += 1
            try:
                _raw_login(ctx.b, "alice", f"guess{n}", "victim").close()
            except (AssertionError, OSError):
                pass

    def http():
        n = 0
        while _until(deadline):
            n += 1
            _http(ctx.http, "GET", "/api/whoami", user="alice", password=f"guess{n}",
                  timeout=max(1, deadline - time.monotonic()))
    threads = [threading.Thread(target=f) for f in (amqp, amqp, http)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def dedup_cache(ctx, deadline):
    """Finding 8: a deduplication cache of 2^30 entries."""
    from pamqp import commands
    i = 0
    while _until(deadline):
        i += 1
        try:
            c = _raw_login(ctx.b, "mallory", "pw", "hostile")
            c.open_channel(1)
            c.send(1, commands.Queue.Declare(queue=f"dedup-{i}", arguments={
                "x-message-deduplication": True, "x-cache-size": 2 ** 30}))
            c.read_frame()
            c.close()
        except (AssertionError, OSError):
            pass


def socket_flood(ctx, deadline):
    """Finding 9: sockets that never log in."""
    held = []
    while _until(deadline):
        try:
            held.append(socket.create_connection((ctx.b.host, ctx.b.port)))
        except OSError:
            time.sleep(0.01)
        if len(held) > 2000:
            held.pop(0).close()
    for s in held:
        s.close()


def unfinished_bodies(ctx, deadline):
    """Finding 9: 100 MB bodies started, then nothing; transactions on six channels."""
    from pamqp import commands, frame, header
    clients = []
    try:
        c = _raw_login(ctx.b, "mallory", "pw", "hostile")
        for ch in range(1, 7):
            c.open_channel(ch)
            c.send(ch, commands.Tx.Select())
            c.read_frame()
            c.sendall(frame.marshal(commands.Basic.Publish(exchange="", routing_key="stall-q"), ch)
                      + frame.marshal(header.ContentHeader(0, 100_000_000, commands.Basic.Properties()), ch))
            chunk = struct.pack(">BHI", 3, ch, 131064) + bytes(131064) + b"\xce"
            for _ in range(80):
                c.sendall(chunk)
        clients.append(c)
    except (AssertionError, OSError):
        pass
    while _until(deadline):
        time.sleep(0.1)
    for c in clients:
        c.close()


def ring_weights(ctx, deadline):
    """Finding 9: a consistent-hash ring binding of weight 10^6."""
    from pamqp import commands
    i = 0
    while _until(deadline):
        i += 1
        try:
            c = _raw_login(ctx.b, "mallory", "pw", "hostile")
            c.open_channel(1)
            c.send(1, commands.Exchange.Declare(exchange=f"ring-{i}", exchange_type="x-consistent-hash",
                                                arguments={"x-algorithm": "ring"}))
            c.read_frame()
            c.send(1, commands.Queue.Declare(queue=f"ring-q-{i}", exclusive=True))
            c.read_frame()
            c.send(1, commands.Queue.Bind(queue=f"ring-q-{i}", exchange=f"ring-{i}", routing_key="1000000"))
            c.sock.settimeout(max(1, deadline - time.monotonic()))
            c.read_frame()
            c.close()
        except (AssertionError, OSError):
            pass


ATTACKS = [oversize_frame, regex_listing, metrics_amplification, policy_churn, odd_arguments, login_guessing,
           dedup_cache, socket_flood, unfinished_bodies, ring_weights]


class Context:
    def __init__(self, b, metrics_port):
        self.b = b
        self.http = b.http_url
        self.metrics = f"http://{b.host}:{metrics_port}"


def setup(b):
    """The two tenants: `hostile` (mallory: management, policymaker) with
    3,000 queues, 250 policies and 1,000 crafted names; `victim` (alice)."""
    for vhost, user, tags in (("hostile", "mallory", "management,policymaker"), ("victim", "alice", "management")):
        assert _http(b.http_url, "PUT", f"/api/vhosts/{vhost}")[0] in (201, 204)
        assert _http(b.http_url, "PUT", f"/api/users/{user}", {"password": "pw", "tags": tags})[0] in (201, 204)
        assert _http(b.http_url, "PUT", f"/api/permissions/{vhost}/{user}",
                     {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    rng = random.Random(25)
    queues = [f"q-{i % 250:03d}-{i:05d}" for i in range(3000)]
    queues += ["".join(rng.choice("ab") for _ in range(240)) + f"{i:05d}" for i in range(1000)]
    defs = {"queues": [{"vhost": "hostile", "name": q, "durable": False, "auto_delete": False, "arguments": {}}
                       for q in queues],
            "policies": [{"vhost": "hostile", "name": f"p{i:03d}", "pattern": f"^q-{i:03d}-", "apply-to": "queues",
                          "priority": i % 7, "definition": {"max-length": 1000 + i}} for i in range(250)]}
    status, body = _http(b.http_url, "POST", "/api/definitions", defs, timeout=120)
    assert status == 204, body


def run(seconds=3.0, root=ROOT, log=print, fresh=False, only=None):
    """-> {"attacks": {name: the victim's stats}}. fresh: a broker of its own
    for each attack (the code before the fixes does not survive some).
    only: the names of the attacks to run (the baseline always runs)."""
    out = {"attacks": {}}
    b = ctx = None
    attacks = [a for a in ATTACKS if only is None or a.__name__ in only]
    try:
        for attack in [None] + attacks:
            if b is None or fresh:
                if b is not None:
                    _stop(b)
                b, ctx = _start(root)
            name = "baseline" if attack is None else attack.__name__
            stats = _attack_while_publishing(b, ctx, attack, seconds)
            out["attacks"][name] = stats
            log(f"{name:22s} {json.dumps(stats)}")
            if _http(b.http_url, "DELETE", "/api/queues/victim/victim-q/contents", timeout=30)[0] is None:
                if not fresh:
                    break           # the broker no longer answers
                _stop(b)
                b = None
    finally:
        if b is not None:
            _stop(b)
    return out


def _start(root):
    tmp = tempfile.mkdtemp(prefix="hostile-tenant-")
    metrics_port = free_port()
    b = BrokerProcess(os.path.join(tmp, "data"), extra_args=["--metrics-http-port", str(metrics_port)], cwd=root)
    b.start()
    setup(b)
    return b, Context(b, metrics_port)


def _stop(b):
    try:
        b.stop(timeout=120)
    except RuntimeError:
        b.kill()


def _attack_while_publishing(b, ctx, attack, seconds):
    url = f"amqp://alice:pw@{b.host}:{b.port}/victim"
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert victim.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + seconds
    if attack is None:
        time.sleep(seconds)     # the baseline: nobody attacks
    else:
        attack(ctx, deadline)
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
    try:
        stdout, _ = victim.communicate("stop\n", timeout=max(30.0, 3 * seconds))
        return json.loads(stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        victim.kill()
        victim.communicate()
        return {"confirmed": None, "in_queue": None, "p50": None, "p99": None, "max": None, "stuck": True}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="each attack (and the baseline) runs this long")
    p.add_argument("--root", default=ROOT, help="the tree whose broker to run (default: this one)")
    p.add_argument("--fresh", action="store_true", help="a broker of its own for each attack")
    args = p.parse_args()
    run(args.seconds, os.path.abspath(args.root), fresh=args.fresh)


if __name__ == "__main__":
    main()
