"""A cluster node's life.

    start     node id, etcd lease (keepalive thread), the cluster's secret
    follow    replicate from the leader named by etcd's leader key (and,
              lavinmq/clustering/proxy.py, pipe clients to it; answer
              lavinmqctl on the control socket, control.py). A leader
              whose replication port, reached before, now refuses
              connections has lost its process: its lease is revoked at
              once, without waiting out the TTL (see _leader_gone).
              Meanwhile a thread imports what leading needs
              (LEADER_MODULES), so a promotion does not wait for it
    campaign  meanwhile, while in the ISR with a whole copy: one txn
    lead      stop following; open the replicated data directory as the
              broker (lavinmq.server.Server), take followers on the
              replication port, confirm what the ISR holds. The proxies'
              listening sockets pass to the broker's listeners
              (Proxies.close(hand_over=True)): the ports never refuse a
              client across the promotion, which waits in the backlog for
              the few tens of ms the broker takes to start
    fence     the lease is gone (or a newer leader wrote the keys): stop
              confirming at once, close every client, run on_leader_lost,
              and start over as a follower: the process executes itself
              again (LavinMQ exits 3 for a supervisor to restart it)
    stop      SIGTERM: a leader drains its clients (lavinmq.drain: consumers
              cancelled, acks and confirmed publishes taken for [main]
              shutdown_drain_timeout, and replicated), then stops
              confirming, gives its lease back, so a follower from the ISR
              takes over at once, and only then closes its followers'
              connections and its clients; it never
              shrinks the ISR on the way out (LavinMQ 2.9 does, item 8 of
              issue 26, and can leave the cluster with no one to lead)
"""
import asyncio
import logging
import os
import signal
import subprocess
import sys

import lavinmq
from lavinmq import sdnotify, sockopts
from lavinmq.clustering import changes, files, follower, settings
from lavinmq.clustering.control import FollowerControl
from lavinmq.clustering.coordinator import Coordinator
from lavinmq.clustering.etcd import Etcd, EtcdError
from lavinmq.clustering.lease import Lease, LeaseTaken
from lavinmq.clustering.replicator import STOPPING
from lavinmq.drain import StopSignals
from lavinmq.errors import ConfigError

log = logging.getLogger("lavinmq.clustering.node")

RETRY = 0.5
FENCED_EXIT = 3             # LavinMQ's code for a lost leadership, if re-executing fails
ROUNDS_WAIT = 1.0           # s a stopping leader waits for the ISR to have the drain's last flush


class Node:
    def __init__(self, config):
        self.config = config
        self.data_dir = os.path.abspath(config.data_dir)
        self.node_id = settings.node_id(self.data_dir)
        self.uri = settings.advertised_uri(config)
        self.host, self.repl_port = settings.parse_uri(self.uri)
        self.name = settings.node_name(self.uri)
        # node id -> advertised URI of every node this one has heard of (the
        # leaders it followed, the followers it led), to name them by
        self.peers = {self.node_id: self.uri}
        endpoints = settings.endpoints(config)
        # etcd calls time out inside the lease: a node notices a lost etcd in time
        self.etcd = Etcd(endpoints, timeout=max(0.3, min(1.0, config.clustering_lease_ttl / 3)))
        self.coordinator = Coordinator(self.etcd, config.clustering_etcd_prefix, self.node_id, self.uri)
        self.lease = Lease(endpoints, self.node_id, config.clustering_lease_ttl, on_lost=self._lease_lost,
                           uri=self.uri, leader_prefix=self.coordinator.leader_prefix)
        self.role = "starting"
        self.secret = None
        self.client = None          # follower.ReplicationClient toward the leader
        self.client_stops = []      # stops of earlier clients under way (threads that end)
        self.proxies = None         # proxy.Proxies while following
        self.control = None         # control.FollowerControl: the control socket while not leading
        self.leader_uri = None      # as the leader key says
        self.leader_kv = None
        self.server = None          # lavinmq.server.Server while leading
        self.replicator = None
        self.repl_server = None
        self.stopping = asyncio.Event()
        self.fenced = asyncio.Event()
        self.wake = asyncio.Event()     # the copy became whole: campaign now
        self.loop = None
        self.elected_at = None
        self.won_at = None          # loop time the campaign won
        files.keep_own(self.data_dir, [config.log_file, config.pidfile, config.control_unix_path])
        self.checksums = files.ChecksumCache.restore(self.data_dir)     # every role's, saved on the way out

    # -- the whole life ---------------------------------------------------------------------

    async def run(self):
        self.loop = asyncio.get_running_loop()
        # the first SIGTERM/SIGINT stops (self.stopping), a second cuts the drain short
        self.signals = StopSignals(self.loop, self.stopping)
        self.loop.add_signal_handler(signal.SIGHUP, self._reload)
        log.info("lavinmq %s: cluster node %s (%s), etcd prefix %s", lavinmq.__version__,
                 settings.to_base36(self.node_id), self.uri, self.config.clustering_etcd_prefix)
        sdnotify.notify(f"READY=1\nSTATUS=cluster node {self.uri}\nMAINPID={os.getpid()}")
        try:
            # lavinmqctl against this node while it is not the leader (the broker opens its own)
            self.control = FollowerControl(self)
            await self.control.start()
            if not await self._until_stopped(self._start()):
                return 0
            self.role = "follower"
            await self._start_proxies()
            warm = asyncio.ensure_future(asyncio.to_thread(_import_leader_modules))
            follow = asyncio.ensure_future(self._follow())
            campaign = asyncio.ensure_future(self._campaign())
            elected = False
            try:
                elected = await self._until_stopped(campaign)
                self.won_at = self.loop.time()
            finally:
                follow.cancel()
                campaign.cancel()
                if self.proxies is not None:
                    # elected: the proxies' ports stay open for the broker's
                    # listeners (clients wait in the backlog, never refused)
                    await self.proxies.close(hand_over=elected)
                    self.proxies = None
                await asyncio.gather(follow, campaign, return_exceptions=True)
                await self._stop_following()
                await self._close_control()
                # no import under way in that thread while this one imports the same modules
                await asyncio.gather(warm, return_exceptions=True)
            if not elected:
                return 0
            if follower.is_syncing(self.data_dir):
                # a sync began between the campaign's check and the win (with
                # a leader that was on its way out): this copy is not whole
                log.error("elected while a sync was under way: stepping down")
                self.role = "leader"
                self.fence("elected with an unfinished sync")
                return await self._fenced_exit()
            return await self._lead()
        finally:
            await self._leave()

    async def _until_stopped(self, aw):
        """-> True once aw is done, False if the node is told to stop first."""
        task = asyncio.ensure_future(aw)
        stop = asyncio.ensure_future(self.stopping.wait())
        done, _ = await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            stop.cancel()
            task.result()
            return True
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False

    async def _start(self):
        said = 0.0
        while True:
            try:
                await asyncio.to_thread(self.lease.grant)
                break
            except LeaseTaken as exc:
                raise ConfigError(str(exc)) from None
            except (EtcdError, OSError) as exc:
                if self.loop.time() - said > 10:       # once in a while, not twice a second
                    said = self.loop.time()
                    log.warning("etcd: cannot take a lease: %s; retrying", exc)
                await asyncio.sleep(RETRY)
        self.lease.start()
        while True:
            try:
                self.secret = await self.coordinator.secret()
                return
            except EtcdError as exc:
                log.warning("etcd: cannot read the cluster's secret: %s; retrying", exc)
                await asyncio.sleep(RETRY)

    def _lease_lost(self, reason):
        """From the keepalive thread."""
        self.loop.call_soon_threadsafe(self._on_lease_lost, reason)

    def _on_lease_lost(self, reason):
        if self.role == "leader":
            self.fence(f"lease lost: {reason}")
        elif self.role in ("follower", "starting") and not self.stopping.is_set():
            # a follower's lease only lets it campaign: take a new one
            asyncio.ensure_future(self._regrant())

    async def _regrant(self):
        said = 0.0
        while not self.stopping.is_set() and self.role != "leader":
            try:
                await asyncio.to_thread(self.lease.grant)
                self.lease.start()
                log.info("etcd lease taken again")
                return
            except (EtcdError, OSError) as exc:
                if self.loop.time() - said > 10:
                    said = self.loop.time()
                    log.warning("etcd: cannot take a lease: %s; retrying", exc)
                await asyncio.sleep(RETRY)

    # -- following ---------------------------------------------------------------------------

    async def _follow(self):
        """Follow whoever the leader key names, for as long as this node follows."""
        while True:
            try:
                kv, rev = await self.coordinator.leader()
                uri = kv.value.decode("utf-8", "replace") if kv is not None else None
                self.leader_kv = kv
                if kv is not None and kv.lease:
                    self.peers[kv.lease] = uri      # the lease id is the leader's node id
                await self._follow_uri(uri)
                async for _ in self.etcd.watch(self.coordinator.leader_prefix, rev + 1, prefix=True):
                    break       # something changed: read it again
            except EtcdError as exc:
                log.debug("following: %s", exc)
                await asyncio.sleep(RETRY)

    async def _follow_uri(self, uri):
        if uri == self.leader_uri:
            return
        await self._stop_following()
        self.leader_uri = uri
        if self.proxies is not None:
            self.proxies.retarget(None)
        if uri is None:
            log.info("no leader")
            return
        if uri == self.uri:
            if self.leader_kv is not None and self.leader_kv.lease == self.lease.lease_id:
                return      # this node's own key: its campaign won a moment ago, it is about to lead
            log.error("the leader key names this node's URI %s but this node does not lead: another node "
                      "advertises the same URI ([clustering] advertised_uri must differ per node)", uri)
            return
        try:
            host, port = settings.parse_uri(uri)
        except ValueError:
            log.error("the leader key holds %r, not tcp://host:port", uri)
            return
        log.info("following the leader at %s", uri)
        local = self.config.clustering_bind if self.config.clustering_bind not in ("0.0.0.0", "::", "") else None
        kv = self.leader_kv
        self.client = follower.ReplicationClient(
            self.data_dir, self.node_id, self.secret, host, port, local_addr=local, on_synced=self._synced,
            on_refused=lambda: self.loop.call_soon_threadsafe(self._leader_gone, kv), uri=self.uri,
            keepalive=self.config.tcp_keepalive, cache=self.checksums,
            on_accepted=lambda: self.loop.call_soon_threadsafe(self._leader_took_us, uri, host))
        self.client.start()

    def _leader_took_us(self, uri, host):
        """The leader at uri took this node as a follower: clients are piped
        to it from now on. Not before: it believes the PROXY header a pipe
        starts with only from its followers' addresses, and a new leader
        would take the first pipes for a stranger's (and log an error)."""
        if self.proxies is not None and uri == self.leader_uri:
            self.proxies.retarget(host)

    def _leader_gone(self, kv):
        asyncio.ensure_future(self._revoke_dead_leader(kv))

    async def _revoke_dead_leader(self, kv):
        """The leader's replication port answered this node before and now
        refuses: nothing listens there, its process is gone (a leader closes
        the port only once it has stopped confirming). Its lease is revoked,
        so that a node from the ISR takes over now rather than after the TTL.
        Safe even if the guess were wrong: a leader confirms only what every
        ISR member acknowledged, or after it wrote an ISR without the ones
        that did not, and with its key gone it can write no ISR; whoever is
        elected is in the ISR, so it holds every confirmed message."""
        if kv is None or not kv.lease:
            return
        try:
            now, _ = await self.coordinator.leader()
            if now is None or now.create_revision != kv.create_revision or now.lease != kv.lease:
                return          # someone else leads already
            if await self.etcd.lease_revoke(kv.lease):
                log.warning("the leader at %s is gone (its replication port refuses connections): "
                            "its lease %x revoked", kv.value.decode("utf-8", "replace"), kv.lease)
        except EtcdError as exc:
            log.info("revoking the gone leader's lease: %s", exc)

    async def _start_proxies(self):
        from lavinmq.clustering.proxy import Proxies
        cfg = self.config
        listeners = []
        if cfg.amqp_port:
            listeners.append((cfg.amqp_bind, cfg.amqp_port, "AMQP"))
        if cfg.http_port:
            listeners.append((cfg.http_bind, cfg.http_port, "HTTP"))
        if cfg.metrics_http_port:
            listeners.append((cfg.metrics_http_bind, cfg.metrics_http_port, "metrics"))
        if cfg.mqtt_port > 0:
            listeners.append((cfg.mqtt_bind, cfg.mqtt_port, "MQTT"))
        if cfg.tls_cert:
            if cfg.mqtts_port > 0:
                listeners.append((cfg.mqtt_bind, cfg.mqtts_port, "MQTTS"))
            if cfg.amqps_port:
                listeners.append((cfg.amqp_bind, cfg.amqps_port, "AMQPS"))
            if cfg.https_port:
                listeners.append((cfg.http_bind, cfg.https_port, "HTTPS"))
        self.proxies = Proxies(listeners, sockopts.SocketOptions.from_config(cfg),
                               proxy_header=not cfg.tcp_proxy_protocol)
        await self.proxies.start()

    def _synced(self):
        """From the follower thread: the copy is whole again."""
        self.loop.call_soon_threadsafe(self.wake.set)

    async def _stop_following(self):
        """Stop the replication client and wait for its threads. A stop, once
        begun, is also waited for by the next call if this one is cancelled
        meanwhile (the follow task is cancelled on the way out): no replication
        thread may outlive the node, or its flush meets an interpreter that is
        shutting down."""
        client, self.client = self.client, None
        if client is not None:
            self.client_stops.append(asyncio.ensure_future(asyncio.to_thread(client.stop)))
        if self.client_stops:
            await asyncio.shield(asyncio.gather(*self.client_stops, return_exceptions=True))
            self.client_stops = [f for f in self.client_stops if not f.done()]

    # -- campaigning --------------------------------------------------------------------------

    def _eligible(self):
        if follower.is_syncing(self.data_dir):
            return False        # an interrupted sync: this copy is neither old nor new
        return self.lease.valid()

    async def _campaign(self):
        while True:
            try:
                await self.coordinator.campaign(self.lease.lease_id, self._eligible, self.wake)
                return True
            except EtcdError as exc:
                log.warning("campaign: %s", exc)
                await asyncio.sleep(RETRY)

    # -- leading -----------------------------------------------------------------------------

    async def _lead(self):
        from lavinmq import launcher, server as broker
        from lavinmq.clustering.replicator import Replicator
        from lavinmq.clustering.server import ReplicationServer
        from lavinmq.http import compat
        self.role = "leader"
        compat.set_node_name(self.name)     # the API names this node as the others do
        self.elected_at = self.loop.time()
        log.info("elected leader (node %s)", settings.to_base36(self.node_id))
        self._hook(self.config.clustering_on_leader_elected, "on_leader_elected")
        while True:
            try:
                isr, _, _ = await self.coordinator.read_isr()
                break
            except EtcdError as exc:
                log.warning("reading the ISR: %s; retrying", exc)
                await asyncio.sleep(RETRY)
        if not self.lease.valid():
            self.fence("lease lost before the broker started")
            return await self._fenced_exit()
        self.server = srv = broker.Server(self.config)
        srv.cluster = self
        self.replicator = rep = Replicator(self.data_dir, self.node_id, self.coordinator, self.lease, srv.syncer,
                                           isr or {self.node_id}, on_fence=self.fence)
        rep.logical_sizes = self.logical_sizes
        changes.recorder = rep
        rep.start()
        self.repl_server = ReplicationServer(rep, self.secret, self.config.clustering_bind,
                                             self.config.clustering_port, keepalive=self.config.tcp_keepalive,
                                             cache=self.checksums)
        try:
            # followers first: they sync while the listeners open
            await self.repl_server.start()
            if self.config.load_definitions:
                launcher.load_definitions(srv, self.config.load_definitions)
            await srv.start()
        except Exception:
            self.fence("the broker did not start")
            raise
        log.info("leading: AMQP on %s:%d, %.0f ms after the election", self.config.amqp_bind, self.config.amqp_port,
                 (self.loop.time() - self.won_at) * 1000)
        stop = asyncio.ensure_future(self.stopping.wait())
        fenced = asyncio.ensure_future(self.fenced.wait())
        await asyncio.wait([stop, fenced], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        fenced.cancel()
        if self.fenced.is_set() and not self.stopping.is_set():
            return await self._fenced_exit()
        await self._step_down()
        return 0

    def logical_sizes(self):
        """rel path -> data size of every write segment (for a full sync's
        listing): the queues' stores and the persistent exchanges'."""
        out = {}
        for vhost in list(self.server.vhosts.values()):
            stores = [getattr(q, "store", None) for q in list(vhost.queues.values())]
            stores += [getattr(getattr(ex, "persist", None), "store", None) for ex in list(vhost.exchanges.values())]
            for store in stores:
                segments = getattr(store, "write_segments", None)
                if segments is None:
                    continue
                for path, size in segments():
                    out[os.path.relpath(path, self.data_dir).replace(os.sep, "/")] = size
        return out

    def peer_name(self, node_id):
        """A node's name (settings.node_name) from the URI it advertised; one
        this node has not heard from yet (an ISR member that has not
        connected since this node took over) by its id."""
        uri = self.peers.get(node_id)
        return settings.node_name(uri) if uri else f"lavinmq@{settings.to_base36(node_id)}"

    def is_follower_host(self, host):
        """Whether a follower's replication link comes from this address:
        its pipes' PROXY headers are believed (lavinmq/listener.py)."""
        rep = self.replicator
        host = host.removeprefix("::ffff:")     # a dual-stack listener's IPv4 peer
        return rep is not None and any(link.peer and link.peer[0].removeprefix("::ffff:") == host
                                       for link in rep.links.values())

    def fence(self, reason):
        """Confirm nothing more, from now on. Safe to call more than once."""
        if self.replicator is not None:
            self.replicator.fence(reason)
        if not self.fenced.is_set():
            log.log(logging.INFO if reason == STOPPING else logging.WARNING, "leadership ends: %s", reason)
            self.fenced.set()

    async def _step_down(self):
        """A clean stop: the clients' grace period first (lavinmq.drain),
        while this node still leads, so that the acks and publishes it
        takes reach the followers and are confirmed; then fenced, the lease
        given back (a follower takes over at once), then the followers and
        clients are let go."""
        sdnotify.notify("STOPPING=1")
        if self.server is not None:
            try:
                await self.server.drain(self.signals.hurry)
                await self._rounds_released(ROUNDS_WAIT)
            except Exception:       # the hand-over must happen whatever went wrong before it
                log.exception("draining the clients before the hand-over")
        self.fence(STOPPING)
        await asyncio.to_thread(self.lease.revoke)
        log.info("lease given back: a follower takes over")
        if self.repl_server is not None:
            self.repl_server.close()
        if self.server is not None:
            await self.server.stop()
        if self.replicator is not None:
            self.replicator.stop()
        changes.recorder = None

    async def _rounds_released(self, limit):
        """The drain's last flush is confirmed once the in-sync replicas have
        it: waited for a moment (unconfirmed, a publisher sends it again)."""
        deadline = self.loop.time() + limit
        rep = self.replicator
        while (rep is not None and rep.rounds and not rep.fenced and self.loop.time() < deadline
               and not self.signals.hurry.is_set()):
            await asyncio.sleep(0.01)

    async def _fenced_exit(self):
        """The lease is gone: close everything, tell the hook, start again as a follower."""
        self._hook(self.config.clustering_on_leader_lost, "on_leader_lost")
        if self.repl_server is not None:
            self.repl_server.close()
        if self.server is not None:
            await self.server.stop(quiet=True)
        if self.replicator is not None:
            self.replicator.stop()
        changes.recorder = None
        await asyncio.to_thread(self.lease.revoke)
        await self.etcd.close()
        await asyncio.to_thread(self.checksums.save, self.data_dir)
        self.role = "restarting"
        restart(self.config.argv)
        return FENCED_EXIT

    async def _close_control(self):
        if self.control is not None:
            await self.control.close()
            self.control = None

    async def _leave(self):
        """Whatever the way out: no thread left behind, the lease given back."""
        await self._close_control()
        if self.role != "restarting":
            await asyncio.to_thread(self.lease.revoke)
        await self._stop_following()
        await self.etcd.close()
        if self.role != "restarting":
            await asyncio.to_thread(self.checksums.save, self.data_dir)

    def _hook(self, command, what):
        if not command:
            return
        try:
            subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL)
        except OSError as exc:
            log.error("%s: %s", what, exc)

    def _reload(self):
        if self.server is not None:
            from lavinmq.reload import reload
            reload(self.server)

    # -- status ------------------------------------------------------------------------------

    def status(self):
        """This node and what it knows of the others (for /api/nodes and lavinmqctl)."""
        out = {"id": settings.to_base36(self.node_id), "uri": self.uri, "role": self.role,
               "leader": self.leader_uri if self.role != "leader" else self.uri,
               "lease_ttl": self.lease.granted_ttl}
        if self.replicator is not None:
            rep = self.replicator
            out["isr"] = sorted(settings.to_base36(i) for i in rep.etcd_isr)
            out["followers"] = [dict(f, id=settings.to_base36(f["id"])) for f in rep.followers()]
        if self.client is not None:
            out["replication"] = self.client.status()
        return out


# what leading imports that following does not (a promotion would pay for
# importing them: ~0.1-0.3 s here, while clients wait); each pulls in the rest
LEADER_MODULES = ("lavinmq.http.server", "lavinmq.http.app", "lavinmq.mqtt.broker", "lavinmq.mqtt.listener",
                  "lavinmq.mqtt.connection", "lavinmq.parameters", "lavinmq.shovel.store", "lavinmq.shovel.runner",
                  "lavinmq.federation.manager", "lavinmq.client.run_loop", "lavinmq.policy_apply",
                  "lavinmq.websocket.upgrade", "lavinmq.long_work", "lavinmq.clustering.server",
                  "lavinmq.clustering.replicator", "lavinmq.clustering.status")


def _import_leader_modules():
    """In a thread while following: what the leader needs, imported ahead."""
    import importlib
    for name in LEADER_MODULES:
        try:
            importlib.import_module(name)
        except Exception:       # noqa: BLE001 (the promotion imports it again and says why)
            log.debug("importing %s ahead of a promotion", name, exc_info=True)


def restart(argv):
    """Execute this process again, with the same arguments: it comes back as
    a follower (the data directory's lock goes with the old image)."""
    logging.shutdown()
    argv = list(argv)
    if getattr(sys, "frozen", False):
        os.execv(sys.executable, [sys.executable, *argv])
    os.execv(sys.executable, [sys.executable, "-m", "lavinmq", *argv])


def run(config):
    """The `lavinmq --clustering` process. Returns the exit code."""
    from lavinmq import launcher
    launcher.raise_fd_limit()

    async def main():
        node = Node(config)
        if config.pidfile:
            launcher.write_pidfile(config.pidfile)
        try:
            return await node.run()
        finally:
            if config.pidfile and node.role != "restarting":
                try:
                    os.unlink(config.pidfile)
                except OSError:
                    pass
    if launcher._loop_kind() == "uvloop":
        import uvloop
        return uvloop.run(main())
    return asyncio.run(main())
