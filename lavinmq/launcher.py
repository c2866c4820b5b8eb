"""The broker process: the event loop, signals (SIGTERM/SIGINT stop
cleanly after a grace period for clients' acks, lavinmq.drain; a second one
cuts it short; SIGHUP reloads), the pidfile, definitions loaded at start, and
systemd's notifications."""
import asyncio
import logging
import os
import signal

import orjson

import lavinmq
from lavinmq import sdnotify
from lavinmq.drain import StopSignals
from lavinmq.listener import ListenError
from lavinmq.reload import reload
from lavinmq.server import Server

log = logging.getLogger("lavinmq.server")


async def serve(config):
    server = Server(config)
    # handlers first: a SIGTERM that comes as soon as the port answers still stops cleanly
    loop = asyncio.get_running_loop()
    signals = StopSignals(loop)
    loop.add_signal_handler(signal.SIGHUP, reload, server)
    try:
        if config.load_definitions:
            load_definitions(server, config.load_definitions)
        await server.start()
    except ListenError:
        await server.stop(quiet=True)
        raise
    if config.pidfile:
        write_pidfile(config.pidfile)
    log.info("lavinmq %s started, data dir %s", lavinmq.__version__, config.data_dir)
    sdnotify.notify(f"READY=1\nSTATUS=listening on {config.amqp_bind}:{config.amqp_port}\nMAINPID={os.getpid()}")
    try:
        await signals.stop.wait()
        sdnotify.notify("STOPPING=1")
        try:
            # clients settle what they hold first; a second signal cuts it short
            await server.drain(signals.hurry)
        finally:
            await server.stop()
    finally:
        if config.pidfile:
            try:
                os.unlink(config.pidfile)
            except OSError:
                pass
    return 0


def write_pidfile(path):
    try:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise ListenError(f"pidfile {path} ([main] pidfile): {exc.strerror}") from None


def load_definitions(server, path):
    """[main] load_definitions: a definitions export imported at every
    start, before the listeners open, as LavinMQ does: what already exists
    (from the data directory) is kept as it is, what is missing is made."""
    from lavinmq.http.importer import import_definitions
    try:
        with open(path, "rb") as f:
            body = orjson.loads(f.read())
        import_definitions(server, body, skip_existing=True)
    except Exception as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        raise ListenError(f"load_definitions {path} ([main] load_definitions): {reason}") from None
    log.info("definitions loaded from %s", path)


def _loop_kind():
    # uvloop unless told otherwise; the test suite also runs on asyncio's loop
    return os.environ.get("LAVINMQ_EVENT_LOOP") or os.environ.get("LAVINMQ_TEST_LOOP") or "uvloop"


def raise_fd_limit():
    """Every connection is a socket: use the hard limit, as LavinMQ does."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except OSError as exc:      # e.g. a seccomp filter; LimitNOFILE= sets it instead
            log.warning("cannot raise the open file limit from %d: %s", soft, exc)


def run(config):
    """Run the broker until SIGTERM/SIGINT. Returns the exit code."""
    raise_fd_limit()
    if _loop_kind() == "uvloop":
        import uvloop
        return uvloop.run(serve(config))
    return asyncio.run(serve(config))
