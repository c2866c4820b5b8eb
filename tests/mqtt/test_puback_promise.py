"""What a PUBACK promises ([mqtt] puback_waits_for_disk, README "MQTT"):
by default it goes out once the message is in its queues, as LavinMQ and
Mosquitto answer; with the setting on, only after the group commit that
puts it on disk. In process, with a syncer whose flush never comes until
the test says so."""
import struct

from lavinmq.config import Config
from lavinmq.mqtt import _mqtt
from lavinmq.vhost import VHost
from tests.mqtt.test_reader_fuzz import Core, feed
from tests.mqtt.conftest import connect_packet, publish_packet


class Transport:
    def __init__(self):
        self.out = bytearray()

    def write(self, data):
        self.out += data


class HeldSyncer:
    """A group commit that is always busy: callbacks wait for flush()."""

    def __init__(self):
        self.waiting = []

    def idle_for(self, acks):
        return False

    def after_flush(self, callback, acks=True):
        self.waiting.append(callback)

    def flush(self):
        for cb in self.waiting:
            cb()
        self.waiting = []


PUBACK = bytes((0x40, 2)) + struct.pack(">H", 7)


def open_core(tmp_path, syncer):
    core = Core(VHost("/", str(tmp_path)))
    core.transport = Transport()
    core.state.syncer = syncer
    feed(core, connect_packet(client_id="p"), [])      # the read ends its batch (end_batch)
    core.transport.out.clear()
    return core


def test_puback_waits_for_nothing_by_default(tmp_path):
    core = open_core(tmp_path, None)
    feed(core, publish_packet("t", b"x", 1, 7), [])
    assert bytes(core.transport.out) == PUBACK


def test_puback_waits_for_the_group_commit_when_asked(tmp_path):
    syncer = HeldSyncer()
    core = open_core(tmp_path, syncer)
    feed(core, publish_packet("t", b"x", 1, 7), [])
    assert bytes(core.transport.out) == b""
    syncer.flush()
    core.flush()
    assert bytes(core.transport.out) == PUBACK


def test_the_setting_decides_which_syncer_a_connection_gets():
    from lavinmq.mqtt.connection import MQTTConnection

    class Server:
        syncer = HeldSyncer()

    for waits, expected in ((False, None), (True, Server.syncer)):
        Server.config = Config(mqtt_puback_waits_for_disk=waits)
        conn = MQTTConnection.__new__(MQTTConnection)
        conn.__init__(Server)
        assert conn.state.syncer is expected
