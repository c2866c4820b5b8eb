"""MQTT errors. A ProtocolError closes only the connection that caused it
(MQTT 3.1.1 has no error packet after CONNACK: the network connection is
closed, and the client's will is published)."""


class ProtocolError(Exception):
    """A malformed or forbidden packet: the connection is closed."""


class ConnectRefused(Exception):
    """CONNECT refused with a CONNACK return code, then closed."""

    def __init__(self, code, reason, logged=True):
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.logged = logged        # False: a login throttle's episode says it already


# CONNACK return codes (MQTT 3.1.1, 3.2.2.3)
ACCEPTED = 0
BAD_PROTOCOL_VERSION = 1
IDENTIFIER_REJECTED = 2
SERVER_UNAVAILABLE = 3
BAD_CREDENTIALS = 4
NOT_AUTHORIZED = 5
