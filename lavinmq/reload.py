"""SIGHUP (`systemctl reload lavinmq`): the settings that can change while
the broker runs are read again — the resource limits and the TLS
certificate. A file that does not load leaves the running settings."""
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
        ctx = tls.new_context(fresh)
    except Exception as exc:
        log.error("TLS reload failed, the certificate in use stays: %s", exc)
        return
    for name in ("tls_cert", "tls_key", "tls_ciphers", "tls_min_version", "tls_verify_peer", "tls_ca_cert"):
        setattr(server.config, name, getattr(fresh, name))
    server.tls_context = ctx
    server.protocols.set_tls_context(ctx)
    if server.http:
        server.http.set_tls_context(ctx)
    log.info("TLS certificate reloaded from %s", fresh.tls_cert)
