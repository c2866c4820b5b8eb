"""A follower's control socket (DATA_DIR/lavinmqctl.sock, or [main]
control_unix_path), so that lavinmqctl works against any node of a cluster:

    GET /api/overview   answered here: this node's name, its role, the
                        leader's name and API, the replication's state
                        (`lavinmqctl status`)
    anything else       passed to the leader's management API (its HTTP port
                        on the leader's host, as the follower's HTTP proxy
                        does), with the request's credentials: the leader
                        checks them and answers (`lavinmqctl cluster_status`,
                        `list_queues`, ...). Without a leader, or when it
                        does not answer: 503, naming the leader and its API.

The socket is created owner and group only, as the leader's; the overview
is answered without credentials (it holds no more than the log does). The
leader sees a passed request come from this follower's address, so a
loopback-only user (guest) is refused when the nodes are on separate hosts:
lavinmqctl then needs a user of its own, as it would with --uri."""
import asyncio
import logging
import os
import time

import aiohttp
from aiohttp import web

import lavinmq
from lavinmq.clustering import settings

log = logging.getLogger("lavinmq.clustering.control")

PASSED_HEADERS = ("Authorization", "Content-Type", "Accept")
TIMEOUT = 30.0                  # s for the leader's answer (lavinmqctl's own timeout)
MAX_BODY = 64 * 1024 * 1024     # the management API's own limit (lavinmq/http/app.py)


class FollowerControl:
    def __init__(self, node):
        self.node = node
        self.started = time.time()
        self.runner = None
        self.server = None
        self.session = None

    @property
    def path(self):
        cfg = self.node.config
        return cfg.control_unix_path or os.path.join(cfg.data_dir, "lavinmqctl.sock")

    async def start(self):
        from lavinmq.http import listen
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_get("/api/overview", self.overview)
        app.router.add_route("*", "/{tail:.*}", self.to_leader)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        try:
            self.server = await listen.unix_server(self.runner, self.path, self.node.config.http_read_timeout)
        except Exception as exc:        # lavinmqctl against this node is lost, the node is not
            log.error("no control socket while following: %s", exc)
            await self.runner.cleanup()
            self.runner = None
            return
        log.debug("the control socket answers as a follower: its status, the rest passed to the leader")

    async def close(self):
        """Before the node leads: the broker opens its own socket at the path."""
        if self.server is not None:
            self.server.close()
            self.server = None
            try:
                os.unlink(self.path)
            except OSError:
                pass
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        if self.session is not None:
            await self.session.close()
            self.session = None

    # -- what the leader is --------------------------------------------------------------

    def leader(self):
        """(name, API URL) of the leader the node follows; (None, None) without one."""
        uri = self.node.leader_uri
        if not uri or uri == self.node.uri:
            return None, None
        try:
            host, _ = settings.parse_uri(uri)
        except ValueError:
            return None, None
        port = self.node.config.http_port
        api = f"http://{'[' + host + ']' if ':' in host else host}:{port}" if port > 0 else None
        return settings.node_name(uri), api

    # -- the routes ------------------------------------------------------------------------

    async def overview(self, request):
        node = self.node
        leader, api = self.leader()
        out = {"node": node.name, "cluster_name": node.name, "product_name": "LavinMQ",
               "product_version": lavinmq.__version__, "lavinmq_version": lavinmq.__version__,
               "management_version": lavinmq.__version__,
               "uptime": int((time.time() - self.started) * 1000),
               "role": node.role, "leader": leader, "leader_api": api, "cluster_node_id": settings.to_base36(node.node_id)}
        if node.client is not None:
            repl = node.client.status()
            repl["state"] = ("streaming" if repl["synced"] else "syncing") if repl["connected"] else \
                f"not connected ({repl['last_error'] or 'connecting'})"
            out["replication"] = repl
        return web.json_response(out)

    async def to_leader(self, request):
        node = self.node
        leader, api = self.leader()
        if api is None:
            why = (f"the leader {leader} serves no HTTP port" if leader else "there is no leader at the moment")
            return self._unavailable(f"{why}; lavinmqctl status shows this follower")
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        headers = {k: request.headers[k] for k in PASSED_HEADERS if k in request.headers}
        try:
            body = await request.read()
            async with self.session.request(request.method, api + request.rel_url.raw_path_qs, data=body or None,
                                            headers=headers, allow_redirects=False) as resp:
                data = await resp.read()
                return web.Response(status=resp.status, body=data,
                                    headers={"Content-Type": resp.headers.get("Content-Type", "application/json"),
                                             "X-Follower": node.name})
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return self._unavailable(f"the leader {leader} does not answer at {api}: "
                                     f"{exc or type(exc).__name__}")

    def _unavailable(self, why):
        return web.json_response({"error": "follower", "reason": f"this node ({self.node.name}) is a follower: {why}"},
                                 status=503)
