"""TLS for the AMQPS and HTTPS listeners, configured as LavinMQ's [main]
tls_* settings: certificate chain, key (default: in the certificate file),
cipher list, minimum version (default 1.2) and, optionally, client
certificates verified against tls_ca_cert.

SIGHUP builds a new context from the files and settings and gives it to
the TLS listeners: new connections get the new certificate, open ones keep
theirs; a context that does not build leaves the running one in place."""
import contextlib
import logging
import os
import ssl
import stat

from lavinmq.errors import ConfigError

log = logging.getLogger("lavinmq.tls")

VERSIONS = {"1.0": ssl.TLSVersion.TLSv1, "1.1": ssl.TLSVersion.TLSv1_1,
            "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def enabled(config):
    return bool(config.tls_cert)


def new_context(config):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # no client-initiated renegotiation, as LavinMQ
    ctx.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    configure(ctx, config)
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
    cert = read_regular_file(config.tls_cert, "tls_cert")
    key = read_regular_file(config.tls_key, "tls_key") if config.tls_key else None
    try:
        with _in_memory(cert) as cert_path, _in_memory(key) as key_path:
            ctx.load_cert_chain(cert_path, key_path)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"tls_cert {config.tls_cert} / tls_key {config.tls_key or '(in tls_cert)'}: "
                          f"cannot load: {exc}") from None
    if config.tls_verify_peer:
        ca = config.tls_ca_cert
        try:
            if ca and os.path.isdir(ca):
                ctx.load_verify_locations(capath=ca)
            elif ca:
                data = read_regular_file(ca, "tls_ca_cert")
                ctx.load_verify_locations(cadata=data.decode("ascii") if b"-----BEGIN" in data else data)
            else:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (ssl.SSLError, OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"tls_ca_cert {ca}: cannot load: {exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE


MAX_TLS_FILE = 1 << 20      # bytes: certificate chains and keys are a few kB


def read_regular_file(path, setting):
    """The bytes of a certificate or key file, read without blocking: at
    SIGHUP a FIFO at the certificate's path hung the event loop in open().
    Opened non-blocking and checked on the open descriptor (no window for a
    swap between a look and the read): only a regular file of at most
    MAX_TLS_FILE bytes is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise ConfigError(f"{setting} {path}: not found") from None
    except OSError as exc:
        raise ConfigError(f"{setting} {path}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{setting} {path}: not a regular file")
        if st.st_size > MAX_TLS_FILE:
            raise ConfigError(f"{setting} {path}: {st.st_size} bytes, more than a certificate or key takes")
        chunks, size = [], 0
        while size <= MAX_TLS_FILE:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_TLS_FILE:
            raise ConfigError(f"{setting} {path}: more than a certificate or key takes")
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{setting} {path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def _in_memory(data):
    """A path OpenSSL can load `data` from (it only loads chains and keys
    from files): an anonymous memory file of this process. None for None."""
    if data is None:
        yield None
        return
    if os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("lavinmq-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    import tempfile       # no /proc (a chroot): a file only we can read, gone after the load
    with tempfile.NamedTemporaryFile(prefix="lavinmq-tls-") as f:
        f.write(data)
        f.flush()
        yield f.name


def peer_certificate_subject(transport):
    """The client's certificate subject (verified), for the API's peer_cert_* keys."""
    obj = transport.get_extra_info("ssl_object") if transport is not None else None
    if obj is None:
        return None
    cert = obj.getpeercert()
    if not cert:
        return None
    return ",".join("=".join(pair) for rdn in cert.get("subject", ()) for pair in rdn)
