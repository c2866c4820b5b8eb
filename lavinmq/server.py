"""The broker: users, vhosts and open connections, and the pieces that
serve them, each in a room of its own — the client protocols' listeners
(lavinmq.protocols), the management API (lavinmq.http), the once-a-second
housekeeping (lavinmq.housekeeping) and the resource alarms
(lavinmq.alarms). The process around it (signals, pidfile) is
lavinmq.launcher."""
import asyncio
import logging
import os
import time

from lavinmq import tls
from lavinmq.alarms import ResourceAlarms
from lavinmq.auth.chain import Authenticator
from lavinmq.auth.throttle import LoginThrottle
from lavinmq.auth.users import UserStore
from lavinmq.global_parameters import GlobalParameters
from lavinmq.housekeeping import Housekeeping
from lavinmq.listener import ConnectionGuard
from lavinmq.protocols import ProtocolListeners
from lavinmq.sync import Syncer, fsync_dir
from lavinmq.vhost_store import VHostStore

log = logging.getLogger("lavinmq.server")


class Server:
    def __init__(self, config):
        self.config = config
        self.data_dir = config.data_dir
        self.connections = set()
        self.draining = False       # a clean stop's grace period began (lavinmq.drain)
        self.links_stopped = False
        self.cluster = None         # lavinmq.clustering.node.Node when this broker leads a cluster
        self.users = UserStore.from_config(config)
        self.users.on_change = self.user_changed
        self.auth = Authenticator(config, self.users)     # auth_backends: local, oauth
        self.login_throttle = LoginThrottle()
        self.syncer = Syncer(self.data_dir) if config.sync else None
        self.alarms = ResourceAlarms(self)
        self.housekeeping = Housekeeping(self)
        self.protocols = ProtocolListeners(self)
        self.started = time.monotonic()
        self.http = None
        from lavinmq.mqtt.broker import Brokers
        self.mqtt = Brokers(self)       # MQTT sessions' state and retained messages, per vhost
        self.guard = ConnectionGuard(config.max_connections, config.max_connections_per_address)
        # built before anything opens: a bad certificate stops the start naming the setting
        self.tls_context = tls.new_context(config, "amqp") if tls.enabled(config) else None
        # HTTPS's own: [sni:host] sections may give it other certificates (http_tls_*)
        self.http_tls_context = tls.new_context(config, "http") if tls.enabled(config) else None
        # and MQTTS's (mqtt_tls_*)
        self.mqtt_tls_context = tls.new_context(config, "mqtt") if tls.enabled(config) else None
        self.vhosts = VHostStore(config, self.syncer)
        from lavinmq._core import segment
        segment.on_map_pressure(self.vhosts.unmap_idle)
        self.vhosts.load()
        from lavinmq.parameters import Parameters
        self.parameters = Parameters(self)      # shovels, federation: started with the listeners
        self.global_parameters = GlobalParameters(self.data_dir)
        fsync_dir(os.path.dirname(os.path.abspath(self.data_dir)))    # the data dir's own name

    # what connections and the API read of the alarms
    disk_alarm = property(lambda self: self.alarms.disk)
    memory_alarm = property(lambda self: self.alarms.memory)
    alarm_reason = property(lambda self: self.alarms.reason)

    # -- vhosts and users ------------------------------------------------------------

    def add_vhost(self, name):
        return self.vhosts.add(name)

    def set_vhost_limits(self, name, limits):
        self.vhosts.set_limits(name, limits)

    def delete_vhost(self, name):
        vhost = self.vhosts.get(name)
        if vhost is None:
            return False
        for conn in list(self.connections):
            if conn.vhost is vhost:
                conn.close(320, "CONNECTION_FORCED - vhost deleted")
        self.parameters.vhost_deleted(name)
        self.mqtt.vhost_deleted(name)
        self.vhosts.remove(name)
        self.users.remove_vhost(name)
        return True

    def user_changed(self, name, vhost):
        """A user was deleted or its permissions on vhost (None: all) changed:
        its open connections follow at once, as new ones would."""
        user = self.users.get(name)
        for conn in list(self.connections):
            if conn.user is None or conn.user.name != name or conn.vhost is None:
                continue
            if getattr(conn.user, "oauth", False):
                continue        # a token's user is not the local user of that name
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
        # HTTP first: once the AMQP port answers, everything does
        from lavinmq.http.server import HTTPServer
        self.http = HTTPServer(self)
        await self.http.start()
        cfg = self.config
        log.info("connection limits: %d in all, %d per source address; handshake timeout %d s",
                 self.guard.max_total, self.guard.max_per_address, cfg.handshake_timeout)
        self.auth.start()
        self.protocols.start()
        self.alarms.check()
        self.housekeeping.start()
        if self.config.log_exchange:
            from lavinmq import log_exchange
            self.log_handler = log_exchange.install(self)
        self.parameters.start()

    async def drain(self, hurry=None):
        """A clean stop's grace period, before stop(): no new connections or
        deliveries, while clients settle what they hold (lavinmq.drain).
        hurry: an asyncio.Event that ends it early (a second signal)."""
        from lavinmq.drain import drain
        return await drain(self, self.config.shutdown_drain_timeout, hurry)

    async def stop_links(self):
        """Shovels and federation links, once: they let their last confirms
        arrive and ack them."""
        if not self.links_stopped:
            self.links_stopped = True
            await self.parameters.stop()

    async def stop(self, quiet=False):
        """Close everything. After drain() what is left is quick; without it
        (a start that failed, a fenced leader) clients are closed at once."""
        if not quiet:
            log.info("shutting down")
        if getattr(self, "log_handler", None) is not None:
            logging.getLogger().removeHandler(self.log_handler)
            self.log_handler = None
        self.protocols.close()
        self.auth.stop()
        if self.http:
            await self.http.stop()
        self.housekeeping.stop()
        await self.stop_links()
        # no more publishes are read; what was stored is confirmed before the
        # connections close, so that publishers (a shovel) resend only what was not
        from lavinmq.drain import quiesce
        await quiesce(self)
        for conn in list(self.connections):
            conn.close()
        # give clients a moment to answer close-ok
        for _ in range(20):
            if not self.connections:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn._close_transport()
        self.mqtt.close()
        if self.syncer is not None:
            await self.syncer.close()
        for vhost in self.vhosts.values():
            vhost.close()
        if not quiet:
            log.info("stopped")
