"""TLS for the AMQPS and HTTPS listeners, configured as LavinMQ's [main]
tls_* settings: certificate chain, key (default: in the certificate file),
cipher list, minimum version (default 1.2) and, optionally, client
certificates verified against tls_ca_cert.

SIGHUP builds a new context from the files and settings and gives it to
the TLS listeners: new connections get the new certificate, open ones keep
theirs; a context that does not build leaves the running one in place."""
import logging
import os
import ssl

from lavinmq.errors import ConfigError

log = logging.getLogger("lavinmq.tls")

VERSIONS = {"1.0": ssl.TLSVersion.TLSv1, "1.1": ssl.TLSVersion.TLSv1_1,
            "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def enabled(config):
    return bool(config.tls_cert)


def new_context(config, protocol="amqp", sni=True):
    """The server context of one protocol's TLS listeners (amqp, http): the
    [main] settings, and the [sni:host] sections' contexts for clients that
    name a host (lavinmq.sni)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # no client-initiated renegotiation, as LavinMQ
    ctx.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    configure(ctx, config)
    if sni:
        from lavinmq import sni as sni_hosts
        sni_hosts.install(ctx, config, protocol, new_context)
    return ctx


def configure(ctx, config):
    """Load certificate, key, ciphers, version and peer verification into
    ctx. ConfigError names the setting that is wrong."""
    version = config.tls_min_version or "1.2"
    try:
        ctx.minimum_version = VERSIONS[version]
    except (ValueError, ssl.SSLError) as exc:
        raise ConfigError(f"tls_min_version {version}: not supported by this OpenSSL ({exc})") from None
    if config.tls_ciphers:
        try:
            ctx.set_ciphers(config.tls_ciphers)
        except ssl.SSLError:
            raise ConfigError(f"tls_ciphers: no cipher matches {config.tls_ciphers!r}") from None
    try:
        ctx.load_cert_chain(config.tls_cert, config.tls_key or None)
    except FileNotFoundError as exc:
        raise ConfigError(f"tls_cert/tls_key: {exc.filename}: not found") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"tls_cert {config.tls_cert} / tls_key {config.tls_key or '(in tls_cert)'}: "
                          f"cannot load: {exc}") from None
    # TLS session keys for Wireshark (LavinMQ's tls_keylog_file, else $SSLKEYLOGFILE)
    keylog = getattr(config, "tls_keylog_file", None) or os.environ.get("SSLKEYLOGFILE")
    if keylog:
        try:
            ctx.keylog_filename = keylog
        except OSError as exc:
            raise ConfigError(f"tls_keylog_file {keylog}: {exc.strerror}") from None
        log.warning("TLS session keys are written to %s (tls_keylog_file): for debugging only", keylog)
    if config.tls_verify_peer:
        ca = config.tls_ca_cert
        try:
            if ca and os.path.isdir(ca):
                ctx.load_verify_locations(capath=ca)
            elif ca:
                ctx.load_verify_locations(cafile=ca)
            else:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"tls_ca_cert {ca}: cannot load: {exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE


def peer_certificate_subject(transport):
    """The client's certificate subject (verified), for the API's peer_cert_* keys."""
    obj = transport.get_extra_info("ssl_object") if transport is not None else None
    if obj is None:
        return None
    cert = obj.getpeercert()
    if not cert:
        return None
    return ",".join("=".join(pair) for rdn in cert.get("subject", ()) for pair in rdn)
