"""The client protocols the broker serves, each on its listeners: AMQP and
AMQPS, MQTT and MQTTS (lavinmq/mqtt; AMQP and MQTT over WebSocket are on
the HTTP listeners, lavinmq/websocket). A new protocol adds its listeners here (a factory for its
connection objects, its ports from the config), beside the others; all of
them share the connection caps (ConnectionGuard), the TLS context and the
TCP options of accepted sockets ([main] tcp_nodelay, tcp_keepalive,
tcp_recv_buffer_size, tcp_send_buffer_size: lavinmq.sockopts)."""
import logging

from lavinmq.amqp.connection import AMQPConnection
from lavinmq.listener import Listener, bind_sockets, bind_unix
from lavinmq.proxy_protocol import parse_trusted
from lavinmq.sockopts import SocketOptions

log = logging.getLogger("lavinmq.server")


class ProtocolListeners:
    def __init__(self, server):
        self.server = server
        self.listeners = []         # lavinmq.listener.Listener
        self.proxy = None           # the PROXY protocol's trusted sources, when tcp_proxy_protocol is on

    def start(self):
        cfg = self.server.config
        new_amqp = lambda: AMQPConnection(self.server)      # noqa: E731
        # LavinMQ's tcp_proxy_protocol: the plain AMQP and MQTT ports take
        # PROXY headers (its listeners share one accept path)
        self.proxy = None
        if cfg.tcp_proxy_protocol:
            self.proxy = parse_trusted(cfg.proxy_protocol_trusted_sources)
            if not self.proxy:
                log.warning("PROXY protocol enabled without trusted sources configured - accepting from all "
                            "sources ([amqp] proxy_protocol_trusted_sources)")
        # MQTT before AMQP: once the AMQP port answers, every listener does
        from lavinmq.mqtt.listener import start_listeners
        start_listeners(self)
        if cfg.amqp_port:
            self.listen(cfg.amqp_bind, cfg.amqp_port, "AMQP port", "--amqp-port / [amqp] port", new_amqp,
                        proxy=self.proxy, followers=self.followers())
        if cfg.amqp_unix_path:
            self.listen_unix(cfg.amqp_unix_path, "AMQP socket", "--amqp-unix-path / [amqp] unix_path", new_amqp)
        if cfg.amqps_port and self.server.tls_context is not None:
            self.listen(cfg.amqp_bind, cfg.amqps_port, "AMQPS port", "--amqps-port / [amqp] tls_port", new_amqp,
                        self.server.tls_context)

    def listen(self, bind, port, what, setting, factory, ssl_context=None, proxy=None, followers=None):
        """what: "AMQP port" (the log names the protocol by its first word);
        setting: the flag and ini key, named when the port is busy."""
        socks = bind_sockets(bind, port, what, setting)
        return self.add(Listener(socks, factory, self.server.guard, what.rsplit(" ", 1)[0], ssl_context,
                                 handshake_timeout=self.server.config.handshake_timeout, proxy=proxy,
                                 sockopts=SocketOptions.from_config(self.server.config), followers=followers))

    def followers(self):
        """A cluster's leader: which hosts are its followers, whose pipes
        name their clients in a PROXY header (lavinmq/clustering/proxy.py)."""
        cluster = self.server.cluster
        return cluster.is_follower_host if cluster is not None else None

    def listen_unix(self, path, what, setting, factory):
        """A UNIX socket listener: its clients are local (loopback for the
        loopback-only users) unless a PROXY header names another."""
        return self.add(Listener(bind_unix(path, what, setting), factory, self.server.guard, what.split(" ", 1)[0],
                                 handshake_timeout=self.server.config.handshake_timeout))

    def add(self, listener):
        listener.start()
        self.listeners.append(listener)
        return listener

    def set_socket_options(self):
        """The config's TCP options changed (SIGHUP): for sockets accepted from now on."""
        opts = SocketOptions.from_config(self.server.config)
        for listener in self.listeners:
            if listener.sockopts is not None:
                listener.sockopts = opts

    def set_tls_context(self, ctx, mqtt_ctx=None):
        """New certificates (SIGHUP): AMQPS gets ctx, MQTTS mqtt_ctx (its
        [sni:host] mqtt_tls_* overrides), or ctx without one."""
        for listener in self.listeners:
            if listener.ssl is not None:
                listener.ssl = mqtt_ctx if mqtt_ctx is not None and listener.name.startswith("MQTT") else ctx

    def close(self):
        import os
        for listener in self.listeners:
            paths = listener.paths
            listener.close()
            for path in paths:      # a clean stop leaves no socket file behind
                try:
                    os.unlink(path)
                except OSError:
                    pass
