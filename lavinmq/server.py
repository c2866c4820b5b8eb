"""The broker process: vhosts, the AMQP listener, housekeeping timers, and
clean shutdown on SIGTERM/SIGINT."""
import asyncio
import logging
import os
import signal
import time

import orjson

import lavinmq
from lavinmq import sdnotify
from lavinmq.amqp.connection import AMQPConnection
from lavinmq.auth.users import UserStore
from lavinmq.sync import Syncer, fsync_dir
from lavinmq.vhost import VHost, sha1

log = logging.getLogger("lavinmq.server")

HOUSEKEEPING_INTERVAL = 1.0     # heartbeats are checked this often
UNMAP_EVERY = 5                 # housekeeping rounds between unmapping idle segments


class Server:
    def __init__(self, config):
        self.config = config
        self.data_dir = config.data_dir
        self.connections = set()
        self.vhosts = {}
        self.users = UserStore.from_config(config)
        self.syncer = Syncer(self.data_dir) if config.sync else None
        self.listeners = []
        self._housekeeping = None
        self.disk_alarm = False
        self.started = time.monotonic()
        self.http = None
        self._load_vhosts()
        fsync_dir(os.path.dirname(os.path.abspath(self.data_dir)))    # the data dir's own name

    # -- vhosts ------------------------------------------------------------------

    @property
    def _vhosts_path(self):
        return os.path.join(self.data_dir, "vhosts.json")

    def _load_vhosts(self):
        try:
            with open(self._vhosts_path, "rb") as f:
                entries = orjson.loads(f.read())
        except FileNotFoundError:
            entries = [{"name": "/"}]
        for entry in entries:
            name = entry["name"]
            self.vhosts[name] = VHost(name, self.data_dir, self.config.segment_size, self.syncer)
            self.vhosts[name].set_limits(entry.get("limits") or {})
        self._save_vhosts()

    def set_vhost_limits(self, name, limits):
        """max-connections / max-queues, as RabbitMQ's vhost limits; a
        negative value removes the limit."""
        self.vhosts[name].set_limits(limits)
        self._save_vhosts()

    def _save_vhosts(self):
        data = orjson.dumps([{"name": n, "dir": sha1(n), "limits": v.limits} for n, v in self.vhosts.items()],
                            option=orjson.OPT_INDENT_2)
        tmp = self._vhosts_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._vhosts_path)
        fsync_dir(self.data_dir)    # the rename, and new vhost directories

    def add_vhost(self, name):
        if name not in self.vhosts:
            self.vhosts[name] = VHost(name, self.data_dir, self.config.segment_size, self.syncer)
            self._save_vhosts()
        return self.vhosts[name]

    def delete_vhost(self, name):
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return False
        for conn in list(self.connections):
            if conn.vhost is vhost:
                conn.close(320, "CONNECTION_FORCED - vhost deleted")
        vhost.close()
        import shutil
        shutil.rmtree(vhost.dir, ignore_errors=True)
        self.users.remove_vhost(name)
        self._save_vhosts()
        return True

    # -- lifecycle -----------------------------------------------------------------

    async def start(self):
        loop = asyncio.get_running_loop()
        # HTTP first: once the AMQP port answers, everything does
        from lavinmq.http.app import HTTPServer
        self.http = HTTPServer(self)
        await self.http.start()
        server = await loop.create_server(
            lambda: AMQPConnection(self), self.config.amqp_bind, self.config.amqp_port,
            reuse_address=True, backlog=1024)
        self.listeners.append(server)
        for sock in server.sockets:
            host, port = sock.getsockname()[:2]
            log.info("AMQP listening on %s:%d", host, port)
        self.check_disk()
        self._housekeeping = loop.create_task(self._housekeep())

    async def _housekeep(self):
        rounds = 0
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL)
            rounds += 1
            now = time.monotonic()
            for conn in list(self.connections):
                try:
                    conn.check_heartbeat(now)
                except Exception:
                    log.exception("heartbeat check failed for %s", conn.name)
            self.check_disk()
            if rounds % UNMAP_EVERY == 0:
                for vhost in self.vhosts.values():
                    vhost.unmap_idle()

    def check_disk(self):
        """free_disk_min: below it, publishers are blocked until space returns."""
        limit = self.config.free_disk_min
        low = False
        if limit:
            st = os.statvfs(self.data_dir)
            free = st.f_bavail * st.f_frsize
            low = free < limit
        if low == self.disk_alarm:
            return
        self.disk_alarm = low
        if low:
            log.warning("disk alarm: %d bytes free in %s, below free_disk_min %d: publishers blocked",
                        free, self.data_dir, limit)
        else:
            log.warning("disk alarm cleared: publishers unblocked")
        for conn in list(self.connections):
            conn.set_blocked(low)

    def reload(self):
        """SIGHUP: re-read the settings that can change while running."""
        from lavinmq.config import Config
        try:
            fresh = Config.load(self.config.argv)
        except Exception as exc:
            log.error("config reload failed, keeping the running settings: %s", exc)
            return
        self.config.free_disk_min = fresh.free_disk_min
        log.info("config reloaded: free_disk_min %d", fresh.free_disk_min)
        self.check_disk()

    async def stop(self):
        log.info("shutting down")
        for server in self.listeners:
            server.close()
        if self.http:
            await self.http.stop()
        if self._housekeeping:
            self._housekeeping.cancel()
        for conn in list(self.connections):
            conn.close()
        # give clients a moment to answer close-ok
        for _ in range(20):
            if not self.connections:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn._close_transport()
        if self.syncer is not None:
            await self.syncer.close()
        for vhost in self.vhosts.values():
            vhost.close()
        for server in self.listeners:
            await server.wait_closed()
        log.info("stopped")


async def serve(config):
    server = Server(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload)
    log.info("lavinmq %s started, data dir %s", lavinmq.__version__, config.data_dir)
    sdnotify.notify(f"READY=1\nSTATUS=listening on {config.amqp_bind}:{config.amqp_port}\nMAINPID={os.getpid()}")
    await stop.wait()
    sdnotify.notify("STOPPING=1")
    await server.stop()
    return 0


def _loop_kind():
    # uvloop unless told otherwise; the test suite also runs on asyncio's loop
    return os.environ.get("LAVINMQ_EVENT_LOOP") or os.environ.get("LAVINMQ_TEST_LOOP") or "uvloop"


def raise_fd_limit():
    """Every connection is a socket: use the hard limit, as LavinMQ does."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except OSError as exc:      # e.g. a seccomp filter; LimitNOFILE= sets it instead
            log.warning("cannot raise the open file limit from %d: %s", soft, exc)


def run(config):
    """Run the broker until SIGTERM/SIGINT. Returns the exit code."""
    raise_fd_limit()
    if _loop_kind() == "uvloop":
        import uvloop
        return uvloop.run(serve(config))
    return asyncio.run(serve(config))
