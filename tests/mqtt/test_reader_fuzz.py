"""The MQTT packet reader fed hostile bytes in process (no socket): after a
valid CONNECT, random packets and random bytes, cut at random places. The
only outcome of bad input is a ProtocolError (the connection closes); no
other exception, no crash, and valid packets around it still work."""
import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from lavinmq.mqtt import _mqtt
from lavinmq.mqtt.errors import ConnectRefused, ProtocolError
from lavinmq.vhost import VHost
from tests.mqtt.conftest import connect_packet, mstr, packet, publish_packet, subscribe_packet


class Core(_mqtt.MQTTCore):
    """The reader with the control plane stubbed: CONNECT is accepted,
    everything else recorded."""

    def __init__(self, vhost):
        self.errors = []
        self.calls = []
        self.exchange = vhost.exchanges["amq.topic"]

    def on_connect(self, args):
        self.calls.append(("connect", args[4]))
        self.phase = _mqtt.MP_OPEN_

    def refuse_connect(self, exc):
        self.errors.append(exc)
        self.phase = _mqtt.MP_CLOSED_

    def qos2_state(self):
        return bytearray(8192)

    def on_subscribe(self, pid, filters):
        self.calls.append(("subscribe", pid, filters))

    def on_unsubscribe(self, pid, filters):
        self.calls.append(("unsubscribe", pid, filters))

    def on_disconnect(self):
        self.calls.append(("disconnect",))

    def on_retain(self, topic, body, qos):
        self.calls.append(("retain", topic))

    def connection_error(self, exc):
        self.errors.append(exc)
        self.phase = _mqtt.MP_CLOSED_


def feed(core, data, cuts):
    pos = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        part = data[pos:cut]
        pos = max(pos, cut)
        while part:
            buf = core.get_buffer(len(part))
            n = min(len(buf), len(part))
            buf[:n] = part[:n]
            core.buffer_updated(n)
            part = part[n:]


_VHOST = {}


def vhost(tmp_path_factory):
    if "v" not in _VHOST:
        _VHOST["v"] = VHost("/", str(tmp_path_factory.mktemp("fuzz")))
    return _VHOST["v"]


packets = st.one_of(
    st.builds(lambda t, b, q, pid, r, d: publish_packet(t, b, q, pid, r, d),
              st.text(min_size=0, max_size=20), st.binary(max_size=50), st.integers(0, 3), st.integers(0, 65535),
              st.booleans(), st.booleans()),
    st.builds(lambda pid, fs: subscribe_packet(pid, *fs), st.integers(0, 65535),
              st.lists(st.tuples(st.text(max_size=10), st.integers(0, 255)), max_size=3)),
    st.builds(lambda first, body: packet(first, body), st.integers(0, 255), st.binary(max_size=40)),
    st.binary(max_size=60),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(packets, max_size=6), st.lists(st.integers(0, 400), max_size=5))
def test_hostile_input_only_closes_the_connection(tmp_path_factory, stream, cuts):
    core = Core(vhost(tmp_path_factory))
    data = connect_packet(client_id="fuzz") + b"".join(stream)
    feed(core, data, cuts)
    assert core.calls and core.calls[0] == ("connect", b"fuzz")
    for exc in core.errors:
        assert isinstance(exc, (ProtocolError, ConnectRefused)), repr(exc)
    if core.errors:
        assert core.phase == _mqtt.MP_CLOSED_


def test_valid_packets_in_one_byte_pieces(tmp_path_factory):
    core = Core(vhost(tmp_path_factory))
    data = (connect_packet(client_id="bytes") + subscribe_packet(3, ("a/+", 1)) + publish_packet("a/b", b"x", 1, 9)
            + packet(0xa2, struct.pack(">H", 4) + mstr("a/+")) + b"\xc0\x00" + b"\xe0\x00")
    feed(core, data, range(len(data)))
    assert core.errors == []
    assert [c[0] for c in core.calls] == ["connect", "subscribe", "unsubscribe", "disconnect"]
    assert core.publish_count == 1 and core.unroutable_count == 1


def test_a_huge_declared_packet_is_refused_at_its_header(tmp_path_factory):
    core = Core(vhost(tmp_path_factory))
    core.max_packet_size = 1 << 20
    feed(core, connect_packet(client_id="big") + b"\x30\xff\xff\xff\x7f", [])
    assert len(core.errors) == 1 and "larger than max_packet_size" in str(core.errors[0])
