"""Issue 25 finding 3: the unauthenticated metrics port amplified a
request: /metrics/detailed wrote a family once per time it was named, all
of it built on the loop before the first byte went out. 60 repeats over
10,000 queues built 164 MB in 8 s (a confirm in another vhost waited
7.95 s); 292 fit in one request line."""
import concurrent.futures
import time
import urllib.request

from tests.conftest import free_port
from tests.security.conftest import call
from tests.security.stall_meter import ProcessStallMeter
from tests.security.test_oversize_frame import rss_mb

QUEUES = 2000


def _get(url):
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return resp.status, resp.read().decode(), time.monotonic() - started
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read().decode(), time.monotonic() - started


def test_detailed_metrics_work_is_bounded(make_broker):
    port = free_port()
    b = make_broker(extra_args=["--metrics-http-port", str(port)])
    defs = {"queues": [{"name": f"m-{i:05d}", "vhost": "/", "durable": False, "auto_delete": False,
                        "arguments": {}} for i in range(QUEUES)]}
    assert call(b, "POST", "/api/definitions", defs)[0] == 204
    base = f"http://{b.host}:{port}/metrics/detailed?"
    before = rss_mb(b.proc.pid)
    with ProcessStallMeter(b.url) as meter:
        # the attack: one family named 32 times
        status, text, took = _get(base + "&".join(["family=queue_coarse_metrics"] * 32))
        assert status == 200
        assert text.count("# TYPE lavinmq_detailed_queue_messages_ready gauge") == 1
        assert text.count('lavinmq_detailed_queue_messages_ready{queue="m-') == QUEUES
        # ten scrapers at once, each of every family
        every = base + "&".join(f"family={f}" for f in (
            "queue_coarse_metrics", "queue_consumer_count", "connection_churn_metrics", "connection_coarse_metrics",
            "channel_metrics", "exchange_metrics", "vhost_message_stats"))
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(_get, [every] * 10))
        assert all(a[0] == 200 and a[1].endswith("\n") and "telemetry_scrape_duration_seconds" in a[1]
                   for a in answers)
    assert meter.longest < 0.5, f"an AMQP round trip waited {meter.longest:.2f} s"
    assert rss_mb(b.proc.pid) - before < 100
    # past the cap of family parameters: refused, not run
    status, text, _ = _get(base + "&".join(["family=queue_coarse_metrics"] * 200))
    assert status == 400 and "family" in text
    assert b.stop(timeout=120) == 0      # closing 2,000 queues on a loaded machine
