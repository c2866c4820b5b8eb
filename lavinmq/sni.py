"""Per-hostname certificates, as LavinMQ's `[sni:HOSTNAME]` ini sections: a
TLS client that names a host (SNI) gets that host's certificate and
settings; any other gets the `[main]` ones. `[sni:*.example.com]` serves
the names one label under example.com. Inside a section, `tls_cert`,
`tls_key`, `tls_min_version`, `tls_ciphers`, `tls_verify_peer`,
`tls_ca_cert`, `tls_keylog_file`, and the same with an `amqp_`, `mqtt_` or
`http_` prefix for one protocol only (AMQPS, MQTTS, HTTPS; AMQP and MQTT
over WebSocket are on HTTPS)."""
import types

from lavinmq import booleans
from lavinmq.errors import ConfigError

SETTINGS = ("tls_cert", "tls_key", "tls_min_version", "tls_ciphers", "tls_verify_peer", "tls_ca_cert",
            "tls_keylog_file")
PROTOCOLS = ("amqp", "http", "mqtt")


def parse_section(config, hostname, items, path):
    """One [sni:hostname] section into config.sni_hosts (LavinMQ's rules: an
    unknown key or a host without tls_cert is a warning, not an error)."""
    host = config.sni_hosts.get(hostname, {})
    for key, raw in items:
        base = key.split("_", 1)[1] if key.split("_", 1)[0] in PROTOCOLS else key
        if base not in SETTINGS:
            config.warnings.append(f"{path}: [sni:{hostname}] {key}: unknown setting, ignored")
            continue
        if base == "tls_verify_peer" and raw.strip():
            booleans.parse(raw, f"{path}: [sni:{hostname}] {key}")     # a typo stops the start
        host[key] = raw.strip()
    if not host.get("tls_cert"):
        config.warnings.append(f"{path}: [sni:{hostname}] has no tls_cert, ignored")
        config.sni_hosts.pop(hostname, None)
        return
    config.sni_hosts[hostname] = host


def effective(host, protocol):
    """The settings one protocol uses for a host, as tls.configure reads
    them: the protocol's own key, else the host's default."""
    def pick(name):
        value = host.get(f"{protocol}_{name}")
        return host.get(name, "") if value is None else value
    verify = pick("tls_verify_peer")
    return types.SimpleNamespace(tls_cert=pick("tls_cert"), tls_key=pick("tls_key") or None,
                                 tls_min_version=pick("tls_min_version") or None,
                                 tls_ciphers=pick("tls_ciphers") or None,
                                 tls_verify_peer=verify.lower() in booleans.TRUE_WORDS,
                                 tls_ca_cert=pick("tls_ca_cert") or None,
                                 tls_keylog_file=pick("tls_keylog_file") or None)


def install(ctx, config, protocol, new_context):
    """Build every SNI host's context for protocol (with new_context, the
    way lavinmq.tls builds [main]'s) and have ctx hand it to a client that
    names the host. ConfigError names the section."""
    hosts = getattr(config, "sni_hosts", None) or {}
    if not hosts:
        return
    exact, wild = {}, {}
    for hostname, settings in hosts.items():
        try:
            host_ctx = new_context(effective(settings, protocol), sni=False)
        except ConfigError as exc:
            raise ConfigError(f"[sni:{hostname}] {exc}") from None
        if hostname.startswith("*."):
            wild[hostname[1:].lower()] = host_ctx
        else:
            exact[hostname.lower()] = host_ctx

    def pick(ssl_object, server_name, _ctx):
        if not server_name:
            return None
        name = server_name.lower()
        chosen = exact.get(name)
        if chosen is None and "." in name:
            chosen = wild.get(name[name.index("."):])
        if chosen is not None:
            ssl_object.context = chosen
        return None
    ctx.sni_callback = pick
