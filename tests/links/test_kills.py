"""Nothing lost (issue 27 item 4): a shovel with on-confirm moves messages
between two brokers of ours while one of them is killed with SIGKILL
mid-transfer. Every message arrives; duplicates (what the destination had
but the source had not seen acked) are counted and stay within a prefetch.
Meanwhile the shovel shows the error and reconnects after its delay."""
import time

import pytest

from tests.conftest import BrokerProcess, unique
from tests.links.bulk import fill, losses_and_duplicates, take_all
from tests.links.conftest import call, ok, queue_depth, shovel_state, wait_for

N = 400_000
PREFETCH = 1000


@pytest.fixture
def pair(tmp_path):
    src = BrokerProcess(tmp_path / "src").start()
    dst = BrokerProcess(tmp_path / "dst").start()
    yield src, dst
    for b in (src, dst):
        if b.proc.poll() is None:
            b.stop()
        b.check_clean()


def start_shovel(on, src, dst, src_q, dst_q, name):
    ok(on, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": src.url, "src-queue": src_q, "dest-uri": dst.url, "dest-queue": dst_q,
                  "src-prefetch-count": PREFETCH, "reconnect-delay": 1}})


def kill_mid_transfer(victim, dst, dst_q):
    """SIGKILL once the destination holds some but not all."""
    wait_for("transfer under way", lambda: (queue_depth(dst, dst_q) or 0) > N // 20, timeout=60, interval=0.01)
    victim.kill()
    return time.monotonic()


def check_all_arrived(src, dst, src_q, dst_q, what):
    wait_for("source drained", lambda: queue_depth(src, src_q) == 0, timeout=120)
    wait_for("destination complete", lambda: (queue_depth(dst, dst_q) or 0) >= N, timeout=60)
    got = take_all(dst, dst_q)
    lost, duplicates, extra = losses_and_duplicates(got, N)
    print(f"\n{what}: {N} messages, {lost} lost, {duplicates} duplicates")
    assert (lost, extra) == (0, 0)
    assert duplicates <= 2 * PREFETCH
    return duplicates


def test_destination_killed(pair):
    src, dst = pair
    src_q, dst_q, name = unique("src"), unique("dst"), unique("shovel")
    fill(src, src_q, N)
    start_shovel(src, src, dst, src_q, dst_q, name)
    kill_mid_transfer(dst, dst, dst_q)
    state = wait_for("error shown", lambda: (s := shovel_state(src, name)) and s["state"] == "error" and s)
    assert "connection" in state["error"] or "refused" in state["error"]
    time.sleep(1.5)     # it keeps trying (reconnect-delay 1 s) while the destination is down
    assert shovel_state(src, name)["state"] in ("error", "starting")
    dst.start()
    wait_for("running again", lambda: shovel_state(src, name)["state"] == "running", timeout=30)
    check_all_arrived(src, dst, src_q, dst_q, "destination killed")


def test_destination_restarted(pair):
    """A clean restart (SIGTERM) of the destination mid-transfer: what it
    confirmed before closing is acked, so few come twice."""
    src, dst = pair
    src_q, dst_q, name = unique("src"), unique("dst"), unique("shovel")
    fill(src, src_q, N)
    start_shovel(src, src, dst, src_q, dst_q, name)
    wait_for("transfer under way", lambda: (queue_depth(dst, dst_q) or 0) > N // 20, timeout=60, interval=0.01)
    assert dst.stop() == 0
    dst.start()
    duplicates = check_all_arrived(src, dst, src_q, dst_q, "destination restarted")
    # the destination confirms what it stored before it closes (lavinmq.server.stop): ~none twice
    assert duplicates <= 50


def test_source_killed_with_the_shovel_on_the_destination(pair):
    src, dst = pair
    src_q, dst_q, name = unique("src"), unique("dst"), unique("shovel")
    fill(src, src_q, N)
    start_shovel(dst, src, dst, src_q, dst_q, name)
    kill_mid_transfer(src, dst, dst_q)
    state = wait_for("error shown", lambda: (s := shovel_state(dst, name)) and s["state"] == "error" and s)
    assert state["error"]
    src.start()
    check_all_arrived(src, dst, src_q, dst_q, "source killed")


def test_broker_running_the_shovel_killed(pair):
    """The shovel lives in the source broker: killed with it, it comes back
    from its parameter at the restart and finishes the transfer."""
    src, dst = pair
    src_q, dst_q, name = unique("src"), unique("dst"), unique("shovel")
    fill(src, src_q, N)
    start_shovel(src, src, dst, src_q, dst_q, name)
    kill_mid_transfer(src, dst, dst_q)
    src.start()
    wait_for("running after the restart", lambda: (s := shovel_state(src, name)) and s["state"] == "running")
    check_all_arrived(src, dst, src_q, dst_q, "broker running the shovel killed")
    assert call(src, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 200


def test_federation_upstream_killed(pair):
    """Exchange federation: the upstream's federation queue holds what was
    published while the downstream was away; the upstream is killed while
    the link drains it, and the link reconnects and finishes."""
    up, down = pair
    prefix = unique("fk")
    ex, local_q = prefix + ".x", unique("local")
    ok(down, "PUT", f"/api/parameters/federation-upstream/%2F/{prefix}",
       {"value": {"uri": up.url, "reconnect-delay": 1, "prefetch-count": PREFETCH}})
    ok(down, "PUT", f"/api/policies/%2F/{prefix}", {"pattern": f"^{prefix}", "apply-to": "exchanges",
                                                      "definition": {"federation-upstream": prefix}})
    import pika
    conn = pika.BlockingConnection(pika.URLParameters(down.url))
    ch = conn.channel()
    ch.exchange_declare(ex, "fanout", durable=True)
    ch.queue_declare(local_q, durable=True)
    ch.queue_bind(local_q, ex, "")
    conn.close()

    def link():
        found = [lk for lk in ok(down, "GET", "/api/federation-links") if lk["resource"] == ex]
        return found[0] if found else None

    wait_for("link running", lambda: (lk := link()) and lk["status"] == "running")
    fed_q = next(q["name"] for q in ok(up, "GET", "/api/queues/%2F") if q["name"].startswith("federation: "))
    assert down.stop() == 0         # the upstream queue buffers meanwhile
    fill(up, "any", N, exchange=ex)
    assert queue_depth(up, fed_q) == N
    down.start()
    kill_mid_transfer(up, down, local_q)
    wait_for("error shown", lambda: (lk := link()) and lk["status"] == "error" and lk["error"])
    up.start()
    wait_for("running again", lambda: (lk := link()) and lk["status"] == "running", timeout=30)
    check_all_arrived(up, down, fed_q, local_q, "federation upstream killed")
