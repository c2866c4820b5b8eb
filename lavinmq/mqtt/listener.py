"""The MQTT listeners: `[mqtt] port` (1883) and, once the broker has a
certificate, `[mqtt] tls_port` (8883), on `[mqtt] bind`. They accept through
lavinmq.listener (lavinmq.protocols.ProtocolListeners.listen), under the
same connection caps as AMQP and HTTP."""


def start_listeners(protocols):
    from lavinmq.mqtt.connection import MQTTConnection
    server = protocols.server
    cfg = server.config
    new_mqtt = lambda: MQTTConnection(server)       # noqa: E731
    if cfg.mqtt_port > 0:
        protocols.listen(cfg.mqtt_bind, cfg.mqtt_port, "MQTT port", "--mqtt-port / [mqtt] port", new_mqtt)
    if cfg.mqtts_port > 0 and server.tls_context is not None:
        protocols.listen(cfg.mqtt_bind, cfg.mqtts_port, "MQTTS port", "--mqtts-port / [mqtt] tls_port", new_mqtt,
                         server.tls_context)
