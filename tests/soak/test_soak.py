"""Soak: a mixed workload against a real broker for SOAK_SECONDS (60 in CI;
run longer with e.g. SOAK_SECONDS=3600), sampling the broker's RSS and open
file descriptors every second. After warm-up both must stay flat.

Workload: publishers with confirms on durable queues, consumers that ack,
reject and requeue, and churn of connections, queues, bindings and
consumers."""
import asyncio
import os
import random
import time

import aio_pika
import pytest

from tests.conftest import BrokerProcess

SECONDS = int(os.environ.get("SOAK_SECONDS", "60"))
QUEUES = [f"soak-{i}" for i in range(8)]


def sample(pid):
    """-> (RSS MB, of which anonymous MB, open fds). The rest of RSS is
    segment pages mapped from the page cache."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value
    kb = lambda key: int(fields[key].split()[0]) / 1024   # noqa: E731
    return kb("VmRSS"), kb("RssAnon"), len(os.listdir(f"/proc/{pid}/fd"))


async def publisher(url, stop, counts):
    conn = await aio_pika.connect(url)
    ch = await conn.channel(publisher_confirms=True)
    ex = await ch.declare_exchange("soak", aio_pika.ExchangeType.TOPIC, durable=True)
    rng = random.Random()
    while not stop.is_set():
        batch = [ex.publish(aio_pika.Message(os.urandom(rng.choice([16, 200, 4000])),
                                             delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                            routing_key=f"k.{rng.randrange(len(QUEUES))}")
                 for _ in range(100)]
        await asyncio.gather(*batch)
        counts["confirmed"] += len(batch)
        await asyncio.sleep(0.01)
    await conn.close()


async def consumer(url, queue, stop, counts):
    conn = await aio_pika.connect(url)
    ch = await conn.channel()
    await ch.set_qos(prefetch_count=200)
    q = await ch.get_queue(queue)
    rng = random.Random()
    while not stop.is_set():
        try:
            # a timeout, so that a queue drained when the run stops doesn't keep us waiting
            async with q.iterator(timeout=1) as it:
                async for m in it:
                    r = rng.random()
                    if r < 0.9:
                        await m.ack()
                    elif r < 0.95:
                        await m.reject(requeue=False)
                    else:
                        await m.reject(requeue=True)
                    counts["consumed"] += 1
                    if stop.is_set():
                        break
        except asyncio.TimeoutError:
            continue
    await conn.close()


async def ack(m):
    await m.ack()


async def churn(url, stop, counts):
    rng = random.Random()
    while not stop.is_set():
        conn = await aio_pika.connect(url)
        ch = await conn.channel()
        q = await ch.declare_queue(exclusive=rng.random() < 0.5, auto_delete=True)
        await q.bind("soak", routing_key="k.#")
        tag = await q.consume(ack)
        await asyncio.sleep(0.05)
        await q.cancel(tag)
        await q.delete(if_unused=False, if_empty=False)
        await conn.close()
        counts["churned"] += 1


@pytest.fixture
def soak_broker(tmp_path):
    # 1 MiB segments: the written-then-acked segments of the 8 queues roll
    # over and go within the CI run, so their mapped pages level off too
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(f"[main]\nsegment_size = {os.environ.get('SOAK_SEGMENT_SIZE', 1 << 20)}\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    yield b
    b.stop()
    b.check_clean()


@pytest.mark.timeout(SECONDS + 120)
async def test_soak_rss_and_fds_stay_flat(soak_broker):
    fresh_broker = soak_broker
    url = fresh_broker.url
    setup = await aio_pika.connect(url)
    ch = await setup.channel()
    ex = await ch.declare_exchange("soak", aio_pika.ExchangeType.TOPIC, durable=True)
    for i, name in enumerate(QUEUES):
        q = await ch.declare_queue(name, durable=True)
        await q.bind(ex, routing_key=f"k.{i}")
    await setup.close()

    stop = asyncio.Event()
    counts = {"confirmed": 0, "consumed": 0, "churned": 0}
    tasks = [asyncio.create_task(publisher(url, stop, counts)) for _ in range(3)]
    tasks += [asyncio.create_task(consumer(url, q, stop, counts)) for q in QUEUES]
    tasks += [asyncio.create_task(churn(url, stop, counts)) for _ in range(2)]
    samples = []
    start = time.monotonic()
    while time.monotonic() - start < SECONDS:
        await asyncio.sleep(1)
        for t in tasks:
            if t.done() and t.exception():
                raise t.exception()
        samples.append(sample(fresh_broker.proc.pid))
    stop.set()
    # a consumer notices `stop` with its next delivery, and its queue may be
    # empty by now (the last batches are delivered well before their
    # confirms): once the publishers are done, one more message per queue
    await asyncio.wait_for(asyncio.gather(*tasks[:3], *tasks[-2:], return_exceptions=True), 30)
    last = await aio_pika.connect(url)
    last_ch = await last.channel()
    for name in QUEUES:
        await last_ch.default_exchange.publish(aio_pika.Message(b"stop"), routing_key=name)
    await last.close()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)

    curve = ", ".join(f"{rss:.0f}({anon:.0f})MB/{fds}" for rss, anon, fds in samples)
    print(f"\nsoak {SECONDS}s: {counts}\nRSS(anon) MB / fds per second: {curve}")
    third = len(samples) // 3
    middle, last = samples[third:2 * third], samples[2 * third:]
    assert counts["confirmed"] > 0 and counts["consumed"] > 0 and counts["churned"] > 0
    for i, what, slack in ((0, "RSS", 10), (1, "anonymous RSS", 5), (2, "open fds", 10)):
        mid, end = max(s[i] for s in middle), max(s[i] for s in last)
        assert end <= mid + slack, f"{what} grows after warm-up ({mid} -> {end}): {curve}"
    assert fresh_broker.proc.poll() is None
