"""The MQTT listeners: `[mqtt] port` (1883) and, once the broker has a
certificate, `[mqtt] tls_port` (8883), on `[mqtt] bind`, and `[mqtt]
unix_path`. They accept through lavinmq.listener
(lavinmq.protocols.ProtocolListeners), under the same connection caps as
AMQP and HTTP; as LavinMQ's, the plain port reads a PROXY header when
`[amqp] tcp_proxy_protocol` is on, and the UNIX socket always may."""


def start_listeners(protocols):
    from lavinmq.mqtt.connection import MQTTConnection
    server = protocols.server
    cfg = server.config
    new_mqtt = lambda: MQTTConnection(server)       # noqa: E731
    if cfg.mqtt_port > 0:
        protocols.listen(cfg.mqtt_bind, cfg.mqtt_port, "MQTT port", "--mqtt-port / [mqtt] port", new_mqtt,
                         proxy=protocols.proxy, followers=protocols.followers())
    if cfg.mqtts_port > 0 and server.mqtt_tls_context is not None:
        protocols.listen(cfg.mqtt_bind, cfg.mqtts_port, "MQTTS port", "--mqtts-port / [mqtt] tls_port", new_mqtt,
                         server.mqtt_tls_context)
    if cfg.mqtt_unix_path:
        protocols.listen_unix(cfg.mqtt_unix_path, "MQTT socket", "--mqtt-unix-path / [mqtt] unix_path", new_mqtt)
