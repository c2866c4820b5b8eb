"""The MQTT state of the broker: per vhost, the connected clients by
client_id, the session state that is not in the session's queue (QoS 2
packet ids in flight), and the retained messages. Made on a vhost's first
MQTT connection; closed (retained messages written) at shutdown."""
import logging

from lavinmq.mqtt.retain import RetainStore

log = logging.getLogger("lavinmq.mqtt")

QOS2_BITMAP = 65536 // 8


class SessionState:
    """What a session keeps beside its queue while the broker runs: the
    packet ids of QoS 2 publishes received and not yet released (a resend
    with one of them is not routed twice), and those of QoS 2 deliveries
    acknowledged with PUBREC but not PUBCOMP (PUBREL is sent again when the
    client comes back)."""
    __slots__ = ("qos2_in", "pending_pubrel")

    def __init__(self):
        self.qos2_in = None         # made at the session's first QoS 2 publish (8 KiB)
        self.pending_pubrel = []

    def qos2(self):
        if self.qos2_in is None:
            self.qos2_in = bytearray(QOS2_BITMAP)
        return self.qos2_in


class Broker:
    def __init__(self, vhost):
        self.vhost = vhost
        self.clients = {}           # client_id -> MQTTConnection
        self.sessions = {}          # client_id -> SessionState
        self.retain = RetainStore(vhost.dir)

    def session_state(self, client_id):
        st = self.sessions.get(client_id)
        if st is None:
            st = self.sessions[client_id] = SessionState()
        return st

    def close(self):
        try:
            self.retain.close()
        except OSError as exc:
            log.error("vhost %s: writing retained messages failed: %s", self.vhost.name, exc)


class Brokers:
    def __init__(self, server):
        self.server = server
        self.brokers = {}

    def broker(self, vhost):
        b = self.brokers.get(vhost.name)
        if b is None or b.vhost is not vhost:
            b = self.brokers[vhost.name] = Broker(vhost)
        return b

    def clients(self):
        return [c for b in self.brokers.values() for c in b.clients.values()]

    def vhost_deleted(self, name):
        self.brokers.pop(name, None)

    def close(self):
        for b in self.brokers.values():
            b.close()
        self.brokers.clear()
