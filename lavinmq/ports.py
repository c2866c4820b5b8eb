"""Every TCP listener's port, taken before anything is written to the data
directory: a start that cannot listen leaves no data directory, no default
user and no lock file behind, and names every busy port with the flag that
moves it, not only the first one found.

`hold(config)` binds each enabled listener's sockets without listening (a
client that connects meanwhile is refused, as before the start; the port
is this process's) and leaves them in lavinmq.listener.HELD, where each
listener's bind_sockets finds its own when it opens."""
from lavinmq import listener, tls
from lavinmq.listener import ListenError, bind_sockets

# what the error calls it, the flag and ini key that move it, the config's
# bind address and port fields, whether only with TLS on
LISTENERS = [
    ("AMQP port", "--amqp-port / [amqp] port", "amqp_bind", "amqp_port", False),
    ("AMQPS port", "--amqps-port / [amqp] tls_port", "amqp_bind", "amqps_port", True),
    ("HTTP port", "--http-port / [mgmt] port", "http_bind", "http_port", False),
    ("HTTPS port", "--https-port / [mgmt] tls_port", "http_bind", "https_port", True),
    ("metrics port", "--metrics-http-port / [main] metrics_http_port", "metrics_http_bind", "metrics_http_port",
     False),
    ("MQTT port", "--mqtt-port / [mqtt] port", "mqtt_bind", "mqtt_port", False),
    ("MQTTS port", "--mqtts-port / [mqtt] tls_port", "mqtt_bind", "mqtts_port", True),
]
WILDCARDS = ("", "0.0.0.0", "::", None)


def enabled(config):
    """(what, setting, host, port) of the listeners this config opens."""
    on = tls.enabled(config)
    return [(what, setting, getattr(config, bind), getattr(config, port))
            for what, setting, bind, port, needs_tls in LISTENERS
            if getattr(config, port) > 0 and (on or not needs_tls)]     # 0 or -1: off


def same_port(listeners):
    """Two listeners on one port of one address (which binding alone does
    not catch: SO_REUSEADDR lets two sockets bind until one listens)."""
    errors = []
    for i, (what, setting, host, port) in enumerate(listeners):
        for what2, setting2, host2, port2 in listeners[:i]:
            if port == port2 and (host == host2 or host in WILDCARDS or host2 in WILDCARDS):
                errors.append(f"{what} {port} ({setting}) is the same as the {what2} ({setting2})")
    return errors


def hold(config):
    """Bind every enabled listener's port and hold it for its listener;
    ListenError naming each one that cannot be had ("; " between them)."""
    listeners = enabled(config)
    errors = same_port(listeners)
    held = {}
    for what, setting, host, port in listeners:
        try:
            held[(host, port)] = bind_sockets(host, port, what, setting, listen=False)
        except ListenError as exc:
            errors.append(str(exc))
    if errors:
        for socks in held.values():
            for s in socks:
                s.close()
        raise ListenError("; ".join(errors))
    listener.HELD.update(held)


def release():
    """Close what no listener took (a start that stopped half-way)."""
    for socks in listener.HELD.values():
        for s in socks:
            s.close()
    listener.HELD.clear()
