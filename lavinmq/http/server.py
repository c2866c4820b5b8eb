"""The management API's listeners, started and stopped with the broker: the
TCP management port (and HTTPS), the control UNIX socket (lavinmqctl) and
the metrics-only port."""
import os

from aiohttp import web

from lavinmq.http import listen
from lavinmq.http.controller import logs
from lavinmq.http.app import build_app
from lavinmq.http.stats import Sampler


class HTTPServer:
    """The listeners; started and stopped with the broker."""

    def __init__(self, server):
        self.server = server
        self.runners = []
        self.listeners = []         # lavinmq.listener.Listener (TCP, TLS)
        self.unix_servers = []
        self.sampler = Sampler(server, server.config.stats_interval, server.config.stats_log_size)
        logs.install()

    async def start(self):
        cfg = self.server.config
        guard = self.server.guard
        timeout = cfg.http_read_timeout
        self.sampler.start()
        mgmt = await self._runner(build_app(self.server))
        if cfg.http_port:
            self.listeners.append(listen.tcp_listener(mgmt, guard, cfg.http_bind, cfg.http_port, "HTTP port",
                                                      "--http-port / [mgmt] port", timeout))
        if cfg.https_port and self.server.http_tls_context is not None:
            self.listeners.append(listen.tcp_listener(mgmt, guard, cfg.http_bind, cfg.https_port, "HTTPS port",
                                                      "--https-port / [mgmt] tls_port", timeout,
                                                      self.server.http_tls_context))
        if cfg.http_unix_path:
            self.listeners.append(listen.unix_listener(mgmt, guard, cfg.http_unix_path, timeout))
        path = self.control_path
        control = await self._runner(build_app(self.server))
        self.unix_servers.append(await listen.unix_server(control, path, timeout))
        if cfg.metrics_http_port:
            metrics = await self._runner(build_app(self.server, open_access=True))
            self.listeners.append(listen.tcp_listener(metrics, guard, cfg.metrics_http_bind, cfg.metrics_http_port,
                                                      "metrics port",
                                                      "--metrics-http-port / [main] metrics_http_port", timeout))

    @property
    def control_path(self):
        cfg = self.server.config
        return cfg.control_unix_path or os.path.join(cfg.data_dir, "lavinmqctl.sock")

    def set_tls_context(self, ctx):
        for listener in self.listeners:
            if listener.ssl is not None:
                listener.ssl = ctx

    async def _runner(self, app):
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self.runners.append(runner)
        return runner

    async def stop(self):
        self.sampler.stop()
        for listener in self.listeners:
            paths = listener.paths
            listener.close()
            for p in paths:
                try:
                    os.unlink(p)
                except OSError:
                    pass
        for server in self.unix_servers:
            server.close()
        for runner in self.runners:
            await runner.cleanup()
        # a clean stop leaves no socket file behind (a crash leaves one, replaced at the next start)
        try:
            if self.unix_servers:
                os.unlink(self.control_path)
        except OSError:
            pass
