"""Stream consumers' GIS filters, as LavinMQ's: geo-within-radius, geo-bbox
and geo-polygon in the x-stream-filter table, over the messages'
x-geo-lat/x-geo-lon headers."""
from decimal import Decimal as D

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.conftest import unique
from tests.streams.conftest import Collector, declare

# (body, headers): cities, and messages a geo filter never matches. pika
# sends a Python float only as a decimal ('D'); aio-pika's floats ('d')
# are covered below.
PLACES = [
    ("stockholm", {"x-geo-lat": D("59.3293"), "x-geo-lon": D("18.0686")}),
    ("gothenburg", {"x-geo-lat": D("57.7089"), "x-geo-lon": D("11.9746")}),       # 398 km from Stockholm
    ("uppsala", {"x-geo-lat": D("59.8586"), "x-geo-lon": D("17.6389")}),          # 67 km
    ("bergen-int", {"x-geo-lat": 61, "x-geo-lon": 5, "x-stream-filter-value": "norway"}),   # integers ('I')
    ("sydney", {"x-geo-lat": D("-33.8688"), "x-geo-lon": D("151.2093")}),
    ("no-geo", {"x-stream-filter-value": "norway"}),
    ("no-headers", None),
    ("string-lat", {"x-geo-lat": "59.3", "x-geo-lon": D("18.0")}),
    ("out-of-range", {"x-geo-lat": D("95.0"), "x-geo-lon": D("18.0")}),
    ("lat-only", {"x-geo-lat": D("59.3")}),
]


@pytest.fixture(scope="module")
def places(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    name = declare(ch, unique("geo"))
    ch.confirm_delivery()
    for body, headers in PLACES:
        ch.basic_publish("", name, body.encode(), pika.BasicProperties(headers=headers))
    conn.close()
    return name


def bodies(conn, name, **args):
    c = Collector(conn, name, **args)
    got = c.wait(len(PLACES), timeout=0.35)
    c.cancel()
    return [g[1].decode() for g in got]


def test_within_radius(conn, places):
    near = {"lat": D("59.3293"), "lon": D("18.0686"), "radius_km": 100}
    assert bodies(conn, places, **{"x-stream-filter": {"geo-within-radius": near}}) == ["stockholm", "uppsala"]
    # haversine: Gothenburg is ~398 km from Stockholm
    for km, want in ((390, ["stockholm", "uppsala"]), (405, ["stockholm", "gothenburg", "uppsala"])):
        f = {"geo-within-radius": {"lat": D("59.3293"), "lon": D("18.0686"), "radius_km": km}}
        assert bodies(conn, places, **{"x-stream-filter": f}) == want
    # integer arguments count as numbers too
    f = {"geo-within-radius": {"lat": -34, "lon": 151, "radius_km": 50}}
    assert bodies(conn, places, **{"x-stream-filter": f}) == ["sydney"]


def test_bounding_box(conn, places):
    sweden_ish = {"min_lat": D("55.0"), "max_lat": D("70.0"), "min_lon": D("4.0"), "max_lon": D("25.0")}
    assert bodies(conn, places, **{"x-stream-filter": {"geo-bbox": sweden_ish}}) == \
        ["stockholm", "gothenburg", "uppsala", "bergen-int"]
    south = {"min_lat": -90, "max_lat": 0, "min_lon": -180, "max_lon": 180}
    assert bodies(conn, places, **{"x-stream-filter": {"geo-bbox": south}}) == ["sydney"]


def test_polygon_concave(conn, places):
    # a "C" open to the east around Stockholm's longitude: Uppsala and Bergen are
    # inside its arms, Stockholm in the notch
    c_shape = [[55, 4], [62, 4], [62, 20], [D("59.6"), 20], [D("59.6"), 15],
               [D("59.0"), 15], [D("59.0"), 20], [55, 20]]
    got = bodies(conn, places, **{"x-stream-filter": {"geo-polygon": {"points": c_shape}}})
    assert got == ["gothenburg", "uppsala", "bergen-int"]
    triangle = [[-40, 140], [-30, 140], [-30, 160]]
    assert bodies(conn, places, **{"x-stream-filter": {"geo-polygon": {"points": triangle}}}) == ["sydney"]


def test_geo_with_other_filters(conn, places):
    box = {"geo-bbox": {"min_lat": D("55.0"), "max_lat": D("70.0"), "min_lon": D("4.0"), "max_lon": D("25.0")}}
    # all (the default): in the box and tagged norway
    assert bodies(conn, places, **{"x-stream-filter": [{**box}, "norway"]}) == ["bergen-int"]
    # any: in the box or tagged norway
    assert bodies(conn, places, **{"x-stream-filter": [box, "norway"], "x-filter-match-type": "any"}) == \
        ["stockholm", "gothenburg", "uppsala", "bergen-int", "no-geo"]
    # unfiltered messages (no x-stream-filter-value) pass with x-stream-match-unfiltered
    got = bodies(conn, places, **{"x-stream-filter": {"geo-bbox": box["geo-bbox"], "x-stream-filter": "norway"},
                                  "x-stream-match-unfiltered": True})
    assert got == ["stockholm", "gothenburg", "uppsala", "bergen-int", "sydney", "no-headers",
                   "string-lat", "out-of-range", "lat-only"]


@pytest.mark.parametrize("geo", [
    {"geo-within-radius": {"lat": 59, "lon": 18}},                              # no radius
    {"geo-within-radius": {"lat": 59, "lon": 18, "radius_km": 0}},
    {"geo-within-radius": {"lat": 91, "lon": 18, "radius_km": 5}},
    {"geo-within-radius": {"lat": "59", "lon": 18, "radius_km": 5}},
    {"geo-within-radius": "59,18,5"},
    {"geo-bbox": {"min_lat": 60, "max_lat": 50, "min_lon": 0, "max_lon": 1}},
    {"geo-bbox": {"min_lat": 0, "max_lat": 1, "min_lon": -181, "max_lon": 1}},
    {"geo-polygon": {"points": [[0, 0], [1, 1]]}},
    {"geo-polygon": {"points": [[0, 0], [1, 1], [2]]}},
    {"geo-polygon": {"points": "0,0;1,1;2,2"}},
    {"geo-polygon": {}},
])
def test_bad_geo_filters_refused(conn, places, geo):
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_consume(places, lambda *a: None, arguments={"x-stream-filter": geo})
        conn.process_data_events(0.1)
    assert e.value.reply_code == 406
    assert conn.is_open


def test_float_headers_of_other_clients(broker, conn):
    """Doubles ('d': the HTTP API's JSON numbers) and single floats ('f':
    pamqp's, so aio-pika's) are numbers too."""
    from pamqp import commands, header
    from tests.helpers.rawclient import RawClient
    from tests.streams.test_stream_api import api
    name = declare(conn.channel(), unique("geo"))
    api(broker, "/exchanges/%2F/amq.default/publish",
        {"routing_key": name, "payload": "double", "payload_encoding": "string",
         "properties": {"headers": {"x-geo-lat": 59.3293, "x-geo-lon": 18.0686}}})
    api(broker, "/exchanges/%2F/amq.default/publish",
        {"routing_key": name, "payload": "far", "payload_encoding": "string",
         "properties": {"headers": {"x-geo-lat": 10.5, "x-geo-lon": 18.0686}}})
    raw = RawClient(broker.host, broker.port)
    raw.send(1, commands.Channel.Open())
    raw.expect(commands.Channel.OpenOk)
    props = commands.Basic.Properties(headers={"x-geo-lat": 59.5, "x-geo-lon": 18.25})
    raw.send(1, commands.Basic.Publish(exchange="", routing_key=name),
             header.ContentHeader(0, 6, props), __import__("pamqp.body").body.ContentBody(b"single"))
    raw.send(1, commands.Channel.Close(200, "bye", 0, 0))
    raw.expect(commands.Channel.CloseOk)
    f = {"geo-within-radius": {"lat": 59, "lon": 18, "radius_km": 100}}
    c = Collector(conn, name, **{"x-stream-filter": f})
    assert sorted(g[1] for g in c.wait(2)) == [b"double", b"single"]
    assert b"far" not in [g[1] for g in c.settle(0.3)]
