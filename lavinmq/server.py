"""The broker process: vhosts, the AMQP listener, housekeeping timers, and
clean shutdown on SIGTERM/SIGINT."""
import asyncio
import logging
import os
import signal
import time

import orjson

import lavinmq
from lavinmq import process, sdnotify
from lavinmq.amqp.connection import AMQPConnection
from lavinmq.process import resident_memory
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
        self.users.on_change = self.user_changed
        from lavinmq.auth.throttle import LoginThrottle
        self.login_throttle = LoginThrottle()
        self.syncer = Syncer(self.data_dir) if config.sync else None
        self.listeners = []
        self._housekeeping = None
        self.disk_alarm = False
        self.memory_alarm = False
        from lavinmq._core import segment
        segment.on_map_pressure(self.unmap_idle)
        self.memory_limit = 0
        self.started = time.monotonic()
        self.http = None
        from lavinmq import tls
        from lavinmq.listener import ConnectionGuard
        self.guard = ConnectionGuard(config.max_connections, config.max_connections_per_address)
        # built before anything opens: a bad certificate stops the start naming the setting
        self.tls_context = tls.new_context(config) if tls.enabled(config) else None
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
            self.vhosts[name] = self._new_vhost(name)
            self.vhosts[name].set_limits(entry.get("limits") or {})
        self._save_vhosts()

    def _new_vhost(self, name):
        vhost = VHost(name, self.data_dir, self.config.segment_size, self.syncer,
                      consumer_timeout=getattr(self.config, "consumer_timeout", None))
        vhost.policies.max_instructions = self.config.max_policy_instructions
        vhost.max_dedup_cache_size = self.config.max_deduplication_cache_size
        return vhost

    def set_vhost_limits(self, name, limits):
        """max-connections / max-queues, as RabbitMQ's vhost limits; a
        negative value removes the limit."""
        self.vhosts[name].set_limits(limits)
        self._save_vhosts()

    def _save_vhosts(self):
        data = orjson.dumps([{"name": n, "dir": sha1(n), "limits": v.limits} for n, v in self.vhosts.items()],
                            option=orjson.OPT_INDENT_2)
        try:
            with open(self._vhosts_path, "rb") as f:
                if f.read() == data:
                    return      # unchanged (every start): nothing to write, also on a full disk
        except FileNotFoundError:
            pass
        tmp = self._vhosts_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._vhosts_path)
        fsync_dir(self.data_dir)    # the rename, and new vhost directories

    def add_vhost(self, name):
        if name not in self.vhosts:
            self.vhosts[name] = self._new_vhost(name)
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

    def user_changed(self, name, vhost):
        """A user was deleted or its permissions on vhost (None: all) changed:
        its open connections follow at once, as new ones would."""
        user = self.users.get(name)
        for conn in list(self.connections):
            if conn.user is None or conn.user.name != name or conn.vhost is None:
                continue
            if vhost is not None and conn.vhost.name != vhost:
                continue
            if user is None or conn.user is not user:
                conn.close(320, f"CONNECTION_FORCED - user '{name}' was deleted")
            elif not user.can_access(conn.vhost.name):
                conn.close(320, f"CONNECTION_FORCED - access to vhost '{conn.vhost.name}' revoked for "
                                f"user '{name}'")
            else:
                conn.permissions_changed()

    # -- lifecycle -----------------------------------------------------------------

    async def start(self):
        loop = asyncio.get_running_loop()
        # HTTP first: once the AMQP port answers, everything does
        from lavinmq.http.app import HTTPServer
        self.http = HTTPServer(self)
        await self.http.start()
        cfg = self.config
        log.info("connection limits: %d in all, %d per source address; handshake timeout %d s",
                 self.guard.max_total, self.guard.max_per_address, cfg.handshake_timeout)
        if cfg.amqp_port:
            self._listen(cfg.amqp_port, "AMQP port", "--amqp-port / [amqp] port", None)
        if cfg.amqps_port and self.tls_context is not None:
            self._listen(cfg.amqps_port, "AMQPS port", "--amqps-port / [amqp] tls_port", self.tls_context)
        self.check_disk()
        self.check_memory()
        self._housekeeping = loop.create_task(self._housekeep())
        if self.config.log_exchange:
            from lavinmq import log_exchange
            self.log_handler = log_exchange.install(self)

    def _listen(self, port, what, setting, ssl_context):
        from lavinmq.listener import Listener, bind_sockets
        socks = bind_sockets(self.config.amqp_bind, port, what, setting)
        listener = Listener(socks, lambda: AMQPConnection(self), self.guard, what.rsplit(" ", 1)[0],
                            ssl_context, handshake_timeout=self.config.handshake_timeout)
        listener.start()
        self.listeners.append(listener)

    async def _housekeep(self):
        rounds = 0
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL)
            rounds += 1
            now = time.monotonic()
            wall_ms = int(time.time() * 1000)
            for conn in list(self.connections):
                try:
                    conn.check_heartbeat(now)
                    conn.check_consumer_timeouts(wall_ms)
                except Exception:
                    log.exception("heartbeat check failed for %s", conn.name)
            self.check_disk()
            self.check_memory()
            process.trim_if_due()
            if rounds % UNMAP_EVERY == 0:
                for vhost in self.vhosts.values():
                    vhost.unmap_idle()

    def unmap_idle(self):
        for vhost in self.vhosts.values():
            vhost.unmap_idle()

    def check_memory(self):
        """vm_memory_high_watermark: above it, publishers are blocked until
        the broker's resident memory falls back below it."""
        self.memory_limit = int(self.config.vm_memory_high_watermark * total_memory())
        # resident_memory() is 0 where /proc is missing (a chroot): no alarm
        high = bool(self.memory_limit) and resident_memory() > self.memory_limit
        if high and self.memory_alarm:
            self._shed_unfinished()
        if high == self.memory_alarm:
            return
        self.memory_alarm = high
        if high:
            log.warning("memory alarm: resident memory %d bytes above the high watermark %d: "
                        "publishers blocked", resident_memory(), self.memory_limit)
        else:
            log.warning("memory alarm cleared: publishers unblocked")
        self._alarms_changed()

    def _shed_unfinished(self):
        """The memory alarm blocks every publisher: it must not be held by
        bytes nobody finishes. Of the connections whose unfinished bodies
        or transactions made no progress for ALARM_GRACE seconds, the one
        holding most is closed (one a round, until the alarm clears)."""
        from lavinmq.amqp.connection import ALARM_GRACE, STALL_BYTES
        now = time.monotonic()
        stalled = [c for c in self.connections if getattr(c, "phase", None) == 2
                   and c.held_bytes >= STALL_BYTES and c.stalled_for(now) >= ALARM_GRACE]
        if stalled:
            worst = max(stalled, key=lambda c: c.held_bytes)
            log.warning("memory alarm: closing %s, its unfinished message bodies and transactions (%d bytes) "
                        "made no progress for %d s", worst.name, worst.held_bytes, ALARM_GRACE)
            worst.close(320, "CONNECTION_FORCED - low on memory: unfinished messages made no progress")

    def _alarms_changed(self):
        blocked = self.disk_alarm or self.memory_alarm
        reason = "low on disk" if self.disk_alarm else "low on memory"
        for conn in list(self.connections):
            conn.set_blocked(blocked, reason)

    @property
    def alarm_reason(self):
        """What blocks publishers now, None when nothing does."""
        if self.disk_alarm:
            return "low on disk"
        if self.memory_alarm:
            return "low on memory"
        return None

    def check_disk(self):
        """free_disk_min: below it, publishers are blocked until space returns."""
        limit = self.config.disk_free_limit
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
        self._alarms_changed()

    def reload(self):
        """SIGHUP: re-read the settings that can change while running."""
        from lavinmq.config import Config
        try:
            fresh = Config.load(self.config.argv)
        except Exception as exc:
            log.error("config reload failed, keeping the running settings: %s", exc)
            return
        self.config.free_disk_min = fresh.free_disk_min
        self.config.vm_memory_high_watermark = fresh.vm_memory_high_watermark
        log.info("config reloaded: free_disk_min %d, vm_memory_high_watermark %s", self.config.disk_free_limit,
                 self.config.vm_memory_high_watermark)
        self.check_disk()
        self.check_memory()
        self._reload_tls(fresh)

    def _reload_tls(self, fresh):
        from lavinmq import tls
        if self.tls_context is None:
            if tls.enabled(fresh):
                log.warning("enabling TLS requires a restart")
            return
        if not tls.enabled(fresh):
            log.warning("disabling TLS requires a restart; the certificate in use stays")
            return
        try:
            ctx = tls.new_context(fresh)
        except Exception as exc:
            log.error("TLS reload failed, the certificate in use stays: %s", exc)
            return
        for name in ("tls_cert", "tls_key", "tls_ciphers", "tls_min_version", "tls_verify_peer", "tls_ca_cert"):
            setattr(self.config, name, getattr(fresh, name))
        self.tls_context = ctx
        for listener in self.listeners:
            if listener.ssl is not None:
                listener.ssl = ctx
        if self.http:
            self.http.set_tls_context(ctx)
        log.info("TLS certificate reloaded from %s", fresh.tls_cert)

    async def stop(self, quiet=False):
        if not quiet:
            log.info("shutting down")
        if getattr(self, "log_handler", None) is not None:
            logging.getLogger().removeHandler(self.log_handler)
            self.log_handler = None
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
        if not quiet:
            log.info("stopped")


async def serve(config):
    from lavinmq.listener import ListenError
    server = Server(config)
    # handlers first: a SIGTERM that comes as soon as the port answers still stops cleanly
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload)
    try:
        if config.load_definitions:
            load_definitions(server, config.load_definitions)
        await server.start()
    except ListenError:
        await server.stop(quiet=True)
        raise
    if config.pidfile:
        write_pidfile(config.pidfile)
    log.info("lavinmq %s started, data dir %s", lavinmq.__version__, config.data_dir)
    sdnotify.notify(f"READY=1\nSTATUS=listening on {config.amqp_bind}:{config.amqp_port}\nMAINPID={os.getpid()}")
    try:
        await stop.wait()
        sdnotify.notify("STOPPING=1")
        await server.stop()
    finally:
        if config.pidfile:
            try:
                os.unlink(config.pidfile)
            except OSError:
                pass
    return 0


def write_pidfile(path):
    from lavinmq.listener import ListenError
    try:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise ListenError(f"pidfile {path} ([main] pidfile): {exc.strerror}") from None


def load_definitions(server, path):
    """[main] load_definitions: a definitions export imported at every
    start, before the listeners open, as LavinMQ does."""
    from lavinmq.http.importer import import_definitions
    from lavinmq.listener import ListenError
    try:
        with open(path, "rb") as f:
            body = orjson.loads(f.read())
        import_definitions(server, body)
    except Exception as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        raise ListenError(f"load_definitions {path} ([main] load_definitions): {reason}") from None
    log.info("definitions loaded from %s", path)


def _loop_kind():
    # uvloop unless told otherwise; the test suite also runs on asyncio's loop
    return os.environ.get("LAVINMQ_EVENT_LOOP") or os.environ.get("LAVINMQ_TEST_LOOP") or "uvloop"


def total_memory():
    """The machine's memory, or the cgroup's limit when that is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and 0 < int(raw) < total:
            return int(raw)
    return total


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
