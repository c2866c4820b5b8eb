"""aiohttp served through lavinmq.listener: connection caps, EMFILE pauses,
TLS, and a read timeout.

aiohttp closes a connection whose next request has not fully arrived
`keepalive_timeout` seconds after it opened or after the previous response
(its keep-alive timer runs while the handler waits for a request, and data
arriving does not reset it), so that setting is the header read timeout
here: a client that trickles header bytes is cut off after
`http_read_timeout` seconds. Bodies are read under the same limit by
`lavinmq.http.helpers.body_json`."""
import asyncio
import errno
import logging
import os
import socket

from aiohttp.web_protocol import RequestHandler

from lavinmq.listener import TALKING, Listener, ListenError, bind_sockets

log = logging.getLogger("lavinmq.http")


class GuardedRequestHandler(RequestHandler):
    """aiohttp's handler that gives its listener ticket back when it closes,
    and lets the guard close it while no request on it has logged in."""
    ticket = None

    def connection_made(self, transport):
        super().connection_made(transport)
        if self.ticket is not None:
            self.ticket.close = transport.abort

    def data_received(self, data):
        if self.ticket is not None and not self.ticket.logged_in:
            self.ticket.progress(TALKING)
        super().data_received(data)

    def connection_lost(self, exc):
        try:
            super().connection_lost(exc)
        finally:
            if self.ticket is not None:
                self.ticket.release()


def handler_factory(runner, read_timeout):
    loop = asyncio.get_running_loop()

    def factory():
        return GuardedRequestHandler(runner.server, loop=loop, keepalive_timeout=read_timeout,
                                     access_log=None)
    return factory


def tcp_listener(runner, guard, host, port, what, setting, read_timeout, ssl_context=None):
    socks = bind_sockets(host, port, what, setting)
    listener = Listener(socks, handler_factory(runner, read_timeout), guard, what.rsplit(" ", 1)[0],
                        ssl_context, handshake_timeout=read_timeout)
    listener.start()
    return listener


async def unix_server(runner, path, read_timeout):
    """The control socket (lavinmqctl): owner and group only. A socket that
    another live broker answers on is an error, a stale file is replaced."""
    if os.path.exists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1)
            probe.connect(path)
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
                raise ListenError(f"control socket {path} (control_unix_path): {exc.strerror}") from None
        else:
            raise ListenError(f"control socket {path} (control_unix_path) is in use by another broker")
        finally:
            probe.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ListenError(f"control socket {path} (control_unix_path): cannot replace: "
                              f"{exc.strerror}") from None
    loop = asyncio.get_running_loop()
    old = os.umask(0o117)      # created 0660, never briefly open to others
    try:
        server = await loop.create_unix_server(handler_factory(runner, read_timeout), path)
    except OSError as exc:
        raise ListenError(f"control socket {path} (control_unix_path) cannot be opened: "
                          f"{exc.strerror}") from None
    finally:
        os.umask(old)
    log.info("HTTP control listening on %s", path)
    return server
