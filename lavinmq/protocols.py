"""The client protocols the broker serves, each on its listeners: AMQP and
AMQPS, MQTT and MQTTS (lavinmq/mqtt; AMQP and MQTT over WebSocket are on
the HTTP listeners, lavinmq/websocket). A new protocol adds its listeners here (a factory for its
connection objects, its ports from the config), beside the others; all of
them share the connection caps (ConnectionGuard) and the TLS context."""
from lavinmq.amqp.connection import AMQPConnection
from lavinmq.listener import Listener, bind_sockets


class ProtocolListeners:
    def __init__(self, server):
        self.server = server
        self.listeners = []         # lavinmq.listener.Listener

    def start(self):
        cfg = self.server.config
        new_amqp = lambda: AMQPConnection(self.server)      # noqa: E731
        # MQTT before AMQP: once the AMQP port answers, every listener does
        from lavinmq.mqtt.listener import start_listeners
        start_listeners(self)
        if cfg.amqp_port:
            self.listen(cfg.amqp_bind, cfg.amqp_port, "AMQP port", "--amqp-port / [amqp] port", new_amqp)
        if cfg.amqps_port and self.server.tls_context is not None:
            self.listen(cfg.amqp_bind, cfg.amqps_port, "AMQPS port", "--amqps-port / [amqp] tls_port", new_amqp,
                        self.server.tls_context)

    def listen(self, bind, port, what, setting, factory, ssl_context=None):
        """what: "AMQP port" (the log names the protocol by its first word);
        setting: the flag and ini key, named when the port is busy."""
        socks = bind_sockets(bind, port, what, setting)
        listener = Listener(socks, factory, self.server.guard, what.rsplit(" ", 1)[0], ssl_context,
                            handshake_timeout=self.server.config.handshake_timeout)
        listener.start()
        self.listeners.append(listener)
        return listener

    def set_tls_context(self, ctx):
        for listener in self.listeners:
            if listener.ssl is not None:
                listener.ssl = ctx

    def close(self):
        for listener in self.listeners:
            listener.close()
