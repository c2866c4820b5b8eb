"""A client connection to this broker, in-process: a socket pair whose one
end is served by an AMQPConnection as if it had been accepted, the other
end driven by the client. Shovels with a URI without a host ("amqp://",
LavinMQ's local shovels) and federation links (which publish into their own
exchange or queue) use it. Nobody outside this process holds either end, so
the login is not checked: the connection acts as an internal user with every
right on every vhost that may also publish any user_id (LavinMQ's direct user)."""
import asyncio
import socket

from lavinmq.amqp.connection import AMQPConnection
from lavinmq.auth.users import User
from lavinmq.errors import CommandInvalid


class DirectUser(User):
    """Every right on every vhost; not in users.json, cannot log in from outside."""

    def __init__(self):
        super().__init__("lavinmq-internal", tags=("administrator", "impersonator"))

    def can_access(self, vhost):
        return True

    def _allows(self, kind, vhost, name):
        return True


DIRECT_USER = DirectUser()


class DirectConnection(AMQPConnection):
    def __init__(self, server, label):
        super().__init__(server)
        self.label = label

    def connection_made(self, transport):
        super().connection_made(transport)
        self.name = self.label          # what /api/connections shows: the link's own name

    # a shovel's or link's own stop settles what it holds (Parameters.stop, after the drain)
    def begin_drain(self):
        pass

    def unsettled(self):
        return 0

    def _start_ok(self, client_properties, mechanism, response, locale):
        if self.user is not None:
            raise CommandInvalid("connection.start-ok sent twice", 10, 11)
        self.client_properties = client_properties or {}
        caps = self.client_properties.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        self.user = DIRECT_USER
        self.state.user_id = None       # as an impersonator: messages keep the user_id they came with
        self.send_method(0, 10, 30, (self.channel_max, self.frame_max, self.heartbeat_interval))


async def open_direct(server, client_factory, label):
    """-> the client protocol, connected (not yet logged in)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    try:
        await loop.connect_accepted_socket(lambda: DirectConnection(server, label), theirs)
        _, client = await loop.create_connection(client_factory, sock=ours)
    except BaseException:
        ours.close()
        theirs.close()
        raise
    return client
