"""Power-loss harness: the broker on a ForgetFS mount, publishers with
confirms and acking consumers on several queues, and at a random moment the
power goes (unsynced data dropped, the broker killed); the broker restarts
on what survived. Repeated for --cycles, then every queue is drained.

    python -m tests.powerloss.harness --cycles 50 [--no-sync] [--ext4] [--seed N] [--json FILE]

With --ext4 the broker's data directory is on a real ext4 over a loop
device whose image lives on ForgetFS (mount.Ext4OnForget): the kernel's
filesystem on a disk with a volatile write cache.

What it checks, over all cycles:
  lost              confirmed, never acked, and not delivered again after
                    the last cut (nor found in the final drain)
  garbage           a delivery whose body fails its own checksum (every body
                    carries one), or whose properties were not the ones sent
  phantom           a well-formed delivery that was never published
  acked_returned    a message delivered again after its ack was made durable:
                    a consumer follows its acks with a confirmed marker
                    publish on the same connection, and acks sent before a
                    confirmed marker are durable (acks after the last marker
                    are the in-flight window: they may come back)
  start_failures    a restart that did not come up, or a queue it closed
Exit status 0 when all are zero (with --no-sync only garbage, phantoms and
start failures count: losing confirmed messages is what it measures).
"""
import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

import aio_pika

from tests.powerloss.mount import ROOT, Ext4OnForget, ForgetMount, syncfs, write_back_files

MAGIC = b"PLv1"
QUEUES = ["pl-0", "pl-1", "pl-2", "pl-3"]
CONSUMED = (0, 1)              # queues with consumers; the others only build a backlog
MARKERS = "pl-markers"
MODES = ("drop", "torn", "subset:0.5", "subset:0.9")
WINDOW = 64                    # unconfirmed publishes in flight per publisher


def make_body(i, q):
    """Body of message i for queue q: a header, a payload whose size varies
    from a few bytes to several pages, and a checksum of all of it."""
    r = random.Random(i)
    n = r.randrange(2, 400) if r.random() < 0.85 else r.randrange(4000, 40000)
    head = MAGIC + struct.pack("<QBI", i, q, n)
    body = head + hashlib.shake_128(head).digest(n)
    return body + hashlib.blake2b(body, digest_size=8).digest()


def read_body(body):
    """-> (id, queue index) of a well-formed body, None for garbage."""
    if len(body) < 25 or body[:4] != MAGIC:
        return None
    i, q, n = struct.unpack_from("<QBI", body, 4)
    if len(body) != 17 + n + 8 or hashlib.blake2b(body[:-8], digest_size=8).digest() != body[-8:]:
        return None
    return i, q


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """The broker on the mount. Each start is a new boot: it runs in a mount
    namespace of its own where /proc/sys/kernel/random/boot_id is a fresh
    UUID, as after a real power cut."""

    def __init__(self, workdir, data_dir, sync, segment_size, root=ROOT):
        self.root = root
        self.workdir = workdir
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.log_path = os.path.join(workdir, "broker.log")
        self.boot_id_path = os.path.join(workdir, "boot_id")
        self.ini = os.path.join(workdir, "lavinmq.ini")
        with open(self.ini, "w") as f:
            f.write(f"[main]\nsegment_size = {segment_size}\n"
                    f"control_unix_path = {os.path.join(workdir, 'lavinmqctl.sock')}\n"
                    f"sync = {'true' if sync else 'false'}\n")
        self.proc = None
        self.boots = 0

    def start(self, new_boot=True, timeout=60):
        if new_boot or not os.path.exists(self.boot_id_path):
            with open(self.boot_id_path, "w") as f:
                f.write(str(uuid.uuid4()) + "\n")
            self.boots += 1
        log = open(self.log_path, "ab")
        log.write(f"==== start (boot {self.boots}) ====\n".encode())
        log.flush()
        python = sys.executable if self.root == ROOT else os.path.join(self.root, ".venv", "bin", "python")
        broker = [python, "-m", "lavinmq", "-D", self.data_dir, "-c", self.ini,
                  "-p", str(self.port), "--amqp-bind", "127.0.0.1", "--http-port", "0",
                  "--metrics-http-port", "0", "--mqtt-port", "0", "-l", "info"]
        script = 'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"'
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
             self.boot_id_path, *broker],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def note_cut(self):
        with open(self.log_path, "a") as f:
            f.write(CUT_MARK)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


class Ledger:
    """What the clients did and saw, by message id."""

    def __init__(self):
        self.next_id = 1
        self.attempted = set()
        self.confirmed = set()
        self.nacked = set()
        self.acked = set()            # an ack was sent at some point
        self.durable_acks = set()     # acked, and a confirmed marker followed on the connection
        self.window = set()           # acked when the power went, marker not confirmed yet
        self.seen_since_cut = set()   # delivered (well-formed) since the last restart
        self.final = set()            # found in the final drain
        self.delivered = 0
        self.returned_in_window = 0
        self.garbage = []
        self.phantoms = []
        self.acked_returned = []
        self.wrong_queue = []
        self.cycle = 0
        self.origin = {}              # id -> (queue, cycle) of confirmed messages

    def new_id(self):
        i = self.next_id
        self.next_id += 1
        self.attempted.add(i)
        return i

    def check(self, message, q):
        """A delivery: -> its id if it is well formed and was published."""
        self.delivered += 1
        got = read_body(message.body)
        if got is None:
            self.garbage.append({"queue": q, "size": len(message.body), "head": message.body[:32].hex()})
            return None
        i, bq = got
        if i not in self.attempted:
            self.phantoms.append(i)
            return None
        if bq != q:
            self.wrong_queue.append(i)
        if message.message_id != str(i) or message.delivery_mode != aio_pika.DeliveryMode.PERSISTENT:
            self.garbage.append({"queue": q, "id": i, "properties": True})
        if i in self.durable_acks:
            self.acked_returned.append(i)
        elif i in self.window:
            self.returned_in_window += 1
            self.window.discard(i)
        self.seen_since_cut.add(i)
        return i


class Clients:
    """One cycle's publishers and consumers."""

    def __init__(self, url, ledger, rng):
        self.url = url
        self.ledger = ledger
        self.rng = rng
        self.conns = []
        self.tasks = []
        self.pending_acks = []        # per consumer: ids acked since its last confirmed marker

    async def start(self):
        conn = await aio_pika.connect(self.url)
        self.conns.append(conn)
        ch = await conn.channel()
        for name in QUEUES:
            await ch.declare_queue(name, durable=True)
        markers = await ch.declare_queue(MARKERS, durable=True)
        await markers.purge()
        for q in range(len(QUEUES)):
            self.tasks.append(asyncio.ensure_future(self.publisher(q)))
        for q in CONSUMED:
            self.tasks.append(asyncio.ensure_future(self.consumer(q)))

    async def publisher(self, q):
        conn = await aio_pika.connect(self.url)
        self.conns.append(conn)
        ch = await conn.channel(publisher_confirms=True)
        slots = asyncio.Semaphore(WINDOW)
        inflight = set()
        broken = []

        async def one(i):
            try:
                await ch.default_exchange.publish(
                    aio_pika.Message(make_body(i, q), message_id=str(i),
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=QUEUES[q])
                self.ledger.confirmed.add(i)
                self.ledger.origin[i] = (q, self.ledger.cycle)
            except aio_pika.exceptions.DeliveryError:
                self.ledger.nacked.add(i)
            except Exception:
                broken.append(i)    # the connection went with the power
            finally:
                slots.release()

        while not conn.is_closed and not broken:
            await slots.acquire()
            t = asyncio.ensure_future(one(self.ledger.new_id()))
            inflight.add(t)
            t.add_done_callback(inflight.discard)

    async def consumer(self, q):
        pending = []
        self.pending_acks.append(pending)
        conn = await aio_pika.connect(self.url)
        self.conns.append(conn)
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=100)
        marker_ch = await conn.channel(publisher_confirms=True)
        queue = await ch.declare_queue(QUEUES[q], durable=True)
        last_marker = time.monotonic()
        async with queue.iterator() as it:
            async for message in it:
                i = self.ledger.check(message, q)
                await message.ack()
                if i is not None:
                    self.ledger.acked.add(i)
                    pending.append(i)
                if len(pending) >= 50 or time.monotonic() - last_marker > 0.05:
                    # acks before this publish on this connection are in the
                    # flush that confirms it
                    batch = list(pending)
                    await marker_ch.default_exchange.publish(
                        aio_pika.Message(b"marker", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=MARKERS)
                    self.ledger.durable_acks.update(batch)
                    del pending[:len(batch)]
                    last_marker = time.monotonic()

    async def stop(self):
        """After the power cut (the broker is dead): drop the clients. What a
        consumer acked after its last confirmed marker is the window."""
        await asyncio.sleep(0.05)       # confirms already on the wire still count
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for conn in self.conns:
            try:
                await asyncio.wait_for(conn.close(), 2)
            except BaseException:
                pass
        for acks in self.pending_acks:
            self.ledger.window.update(acks)


async def drain_queue(conn, q, name, ledger):
    ch = await conn.channel()
    queue = await ch.declare_queue(name, durable=True, passive=True)
    expected = queue.declaration_result.message_count
    got = 0
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 2.0 and got < expected:
        message = await queue.get(no_ack=True, fail=False, timeout=5)
        if message is None:
            await asyncio.sleep(0.05)
            continue
        idle_since = time.monotonic()
        got += 1
        i = ledger.check(message, q)
        if i is not None:
            ledger.final.add(i)
    await ch.close()
    return {"declared": expected, "drained": got}


async def drain(url, ledger):
    """Consume everything left, without acking through the normal path."""
    conn = await aio_pika.connect(url)
    counts = {}
    try:
        for q, name in enumerate(QUEUES):
            try:
                counts[name] = await drain_queue(conn, q, name, ledger)
            except Exception as exc:     # a queue the broker closed as damaged, or lost
                counts[name] = {"error": repr(exc)[:300]}
    finally:
        await conn.close()
    return counts


CUT_MARK = "==== power cut ====\n"


def before_cuts(log_text):
    """The log without what the broker wrote between a power cut and its
    kill: its I/O failing once the disk is gone (ForgetFS answers
    ENOTCONN/ECONNABORTED, ext4 over it EIO) is what a dead machine does."""
    out = []
    for part in log_text.split(CUT_MARK):
        start = part.find("==== start")
        out.append(part if not out else (part[start:] if start >= 0 else ""))
    return "".join(out)


def closed_queues(log_text):
    return sorted(set(re.findall(r"queue .* closed: .*", before_cuts(log_text))))


def tracebacks(log_text):
    chunks = before_cuts(log_text).split("Traceback (most recent call last)")[1:]
    return [c[:2000] for c in chunks]


async def run(opts):
    workdir = opts.workdir or tempfile.mkdtemp(prefix="powerloss-")
    os.makedirs(workdir, exist_ok=True)
    rng = random.Random(opts.seed)
    if opts.ext4:
        mount = Ext4OnForget(workdir, log_path=os.path.join(workdir, "forgetfs.log")).start()
    else:
        mount = ForgetMount(os.path.join(workdir, "backing"), os.path.join(workdir, "mnt"),
                            log_path=os.path.join(workdir, "forgetfs.log")).start()
    data_dir = os.path.join(mount.mountpoint, "data")
    broker = Broker(workdir, data_dir, opts.sync, opts.segment_size, opts.broker_root)
    ledger = Ledger()
    confirmed_per_cycle = []
    start_failures = []
    modes = {}
    started = time.monotonic()
    try:
        for cycle in range(opts.cycles):
            if not broker.start():
                start_failures.append({"cycle": cycle, "log": broker.log_text()[-3000:]})
                break
            confirmed_before = len(ledger.confirmed)
            ledger.cycle = cycle
            clients = Clients(broker.url, ledger, rng)
            background = [asyncio.ensure_future(write_back(mount, rng, opts.ext4))]
            if not opts.sync:
                background.append(asyncio.ensure_future(flush_now_and_then(mount)))
            try:
                await clients.start()
            except Exception as exc:
                start_failures.append({"cycle": cycle, "error": repr(exc)})
            await asyncio.sleep(rng.uniform(0.4, 1.6))
            mode = rng.choice(opts.modes)
            modes[mode] = modes.get(mode, 0) + 1
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            broker.note_cut()           # first: the broker sees its disk go while cut() runs
            mount.cut(mode, rng.randrange(1 << 30))
            broker.kill()
            await clients.stop()
            mount.reboot()
            confirmed_per_cycle.append(len(ledger.confirmed) - confirmed_before)
            ledger.seen_since_cut = set()
            if opts.verbose:
                print(f"cycle {cycle}: {mode}, {confirmed_per_cycle[-1]} confirmed, "
                      f"{len(ledger.confirmed)} in all", file=sys.stderr, flush=True)
        counts = {}
        if not start_failures:
            if broker.start():
                counts = await drain(broker.url, ledger)
                broker.stop()
            else:
                start_failures.append({"cycle": "final", "log": broker.log_text()[-3000:]})
    finally:
        broker.kill()
        mount.stop()
    log_text = broker.log_text()
    closed = closed_queues(log_text)
    survivors = ledger.final | ledger.seen_since_cut
    lost = sorted(i for i in ledger.confirmed - ledger.acked - survivors)
    report = {
        "sync": opts.sync, "cycles": opts.cycles, "seed": opts.seed, "modes": modes,
        "seconds": round(time.monotonic() - started, 1),
        "published": len(ledger.attempted), "confirmed": len(ledger.confirmed),
        "nacked": len(ledger.nacked), "delivered": ledger.delivered, "acked": len(ledger.acked),
        "durable_acks": len(ledger.durable_acks), "final_drain": counts,
        "returned_in_window": ledger.returned_in_window,
        "lost": len(lost), "lost_ids": lost[:50],
        "lost_by_queue_cycle": sorted({str(ledger.origin[i]): 0 for i in lost}),
        "garbage": len(ledger.garbage), "garbage_samples": ledger.garbage[:10],
        "phantoms": len(ledger.phantoms), "acked_returned": len(ledger.acked_returned),
        "acked_returned_ids": ledger.acked_returned[:50], "wrong_queue": len(ledger.wrong_queue),
        "start_failures": start_failures, "closed_queues": closed[:10],
        "tracebacks": tracebacks(log_text)[:5],
        "fsck": [code for code, _ in getattr(mount, "fsck_log", [])],
        "workdir": workdir,
    }
    return report


async def write_back(mount, rng, ext4=False):
    """The kernel's flusher: dirty pages of the broker's maps go down to the
    "disk" now and then, not only at fdatasync. ForgetFS keeps them
    volatile, so a power cut in subset or torn mode persists a random part
    of them: records the broker never committed, half written. On ext4 the
    pages are written to the disk without a cache flush (a syncfs there
    would flush the cache: everything durable)."""
    while True:
        await asyncio.sleep(rng.uniform(0.02, 0.2))
        if ext4:
            await asyncio.to_thread(write_back_files, mount.mountpoint)
        else:
            await asyncio.to_thread(syncfs, mount.mountpoint)


async def flush_now_and_then(mount, every=1.0):
    """With sync off nothing ever calls fsync; a real kernel still writes
    dirty pages back and commits its journal every few seconds. This stands
    in for that (scaled down from ~30 s to `every`)."""
    while True:
        await asyncio.sleep(every)
        await asyncio.to_thread(syncfs, mount.mountpoint)
        mount.command("sync")


def violations(report):
    bad = (report["garbage"] + report["phantoms"] + len(report["start_failures"])
           + len(report["closed_queues"]) + len(report["tracebacks"]))
    if report["sync"]:
        bad += report["lost"] + report["acked_returned"] + report["wrong_queue"]
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--no-sync", dest="sync", action="store_false")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--segment-size", type=int, default=512 * 1024,
                    help="small segments so that the cycles also cross segment ends")
    ap.add_argument("--modes", type=lambda v: v.split(","), default=list(MODES),
                    help="power cut modes to pick from (comma separated): " + ",".join(MODES))
    ap.add_argument("--broker-root", default=ROOT,
                    help="checkout whose .venv runs the broker (e.g. an older build, to compare)")
    ap.add_argument("--ext4", action="store_true",
                    help="the data directory on ext4 over a loop device on ForgetFS (mount.Ext4OnForget)")
    ap.add_argument("--workdir")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args(argv)
    report = asyncio.run(run(opts))
    text = json.dumps(report, indent=2)
    if opts.json:
        with open(opts.json, "w") as f:
            f.write(text)
    print(text)
    return 1 if violations(report) else 0


if __name__ == "__main__":
    sys.exit(main())
