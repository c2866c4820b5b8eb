"""SIGHUP (`systemctl reload lavinmq`): the settings that can change while
the broker runs are read again — the resource limits, the TCP options of
sockets accepted from then on, and the TLS certificates ([main] and the [sni:host] sections). A file that does not load leaves the running settings."""
import logging

from lavinmq import tls

log = logging.getLogger("lavinmq.server")


def reload(server):
    from lavinmq.config import Config
    try:
        fresh = Config.load(server.config.argv)
    except Exception as exc:
        log.error("config reload failed, keeping the running settings: %s", exc)
        return
    server.config.free_disk_min = fresh.free_disk_min
    server.config.vm_memory_high_watermark = fresh.vm_memory_high_watermark
    server.config.free_disk_warn = fresh.free_disk_warn
    # the TCP options of sockets accepted from now on
    for name in ("tcp_nodelay", "tcp_keepalive", "tcp_recv_buffer_size", "tcp_send_buffer_size"):
        setattr(server.config, name, getattr(fresh, name))
    server.protocols.set_socket_options()
    log.info("config reloaded: free_disk_min %d, vm_memory_high_watermark %s", server.config.disk_free_limit,
             server.config.vm_memory_high_watermark)
    server.alarms.check()
    _reload_tls(server, fresh)


def _reload_tls(server, fresh):
    if server.tls_context is None:
        if tls.enabled(fresh):
            log.warning("enabling TLS requires a restart")
        return
    if not tls.enabled(fresh):
        log.warning("disabling TLS requires a restart; the certificate in use stays")
        return
    try:
        ctx = tls.new_context(fresh, "amqp")
        http_ctx = tls.new_context(fresh, "http")
        mqtt_ctx = tls.new_context(fresh, "mqtt")
    except Exception as exc:
        log.error("TLS reload failed, the certificate in use stays: %s", exc)
        return
    for name in ("tls_cert", "tls_key", "tls_ciphers", "tls_min_version", "tls_verify_peer", "tls_ca_cert",
                 "tls_keylog_file", "sni_hosts"):
        setattr(server.config, name, getattr(fresh, name))
    server.tls_context = ctx
    server.http_tls_context = http_ctx
    server.mqtt_tls_context = mqtt_ctx
    server.protocols.set_tls_context(ctx, mqtt_ctx)
    if server.http:
        server.http.set_tls_context(http_ctx)
    log.info("TLS certificate reloaded from %s", fresh.tls_cert)
