"""Stream consumers' GIS filters, as LavinMQ's (`x-stream-filter` table
keys `geo-within-radius`, `geo-bbox`, `geo-polygon`): checked and turned
into the tuples `_core.stream.StreamConsumer.set_filters` takes. Matching a
message's `x-geo-lat`/`x-geo-lon` headers happens in Cython."""
import decimal
import struct

from lavinmq._core.stream import GEO_BBOX, GEO_POLYGON, GEO_RADIUS
from lavinmq.errors import PreconditionFailed

GEO_KEYS = ("geo-within-radius", "geo-bbox", "geo-polygon")


class _Bad(ValueError):
    pass


def _number(table, key):
    if key not in table:
        raise _Bad(f"missing field {key}")
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
        raise _Bad(f"{key} must be a number")
    return float(v)


def _point(lat, lon):
    # written so that NaN fails too
    if not -90.0 <= lat <= 90.0:
        raise _Bad("latitude must be between -90 and 90")
    if not -180.0 <= lon <= 180.0:
        raise _Bad("longitude must be between -180 and 180")
    return lat, lon


def _box(min_lat, max_lat, min_lon, max_lon):
    if not min_lat <= max_lat:
        raise _Bad("min_lat must be <= max_lat")
    if not min_lon <= max_lon:
        raise _Bad("min_lon must be <= max_lon")
    _point(min_lat, min_lon)
    _point(max_lat, max_lon)
    return (min_lat, max_lat, min_lon, max_lon)


def _radius(t):
    lat, lon = _point(_number(t, "lat"), _number(t, "lon"))
    km = _number(t, "radius_km")
    if not km > 0:
        raise _Bad("radius_km must be positive")
    return (GEO_RADIUS, (lat, lon, km))


def _bbox(t):
    return (GEO_BBOX, _box(*(_number(t, k) for k in ("min_lat", "max_lat", "min_lon", "max_lon"))))


def _polygon(t):
    points = t.get("points")
    if points is None:
        raise _Bad("missing field points")
    if not isinstance(points, (list, tuple)):
        raise _Bad("points must be an array")
    if len(points) < 3:
        raise _Bad(f"a polygon needs at least 3 points, got {len(points)}")
    flat = []
    for i, p in enumerate(points):
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise _Bad(f"point {i} must be an array of 2 numbers [lat, lon]")
        flat.extend(_point(*(_number({"lat": p[0], "lon": p[1]}, k) for k in ("lat", "lon"))))
    lats, lons = flat[0::2], flat[1::2]
    box = (min(lats), max(lats), min(lons), max(lons))
    return (GEO_POLYGON, box, struct.pack(f"={len(flat)}d", *flat))


_PARSERS = {"geo-within-radius": _radius, "geo-bbox": _bbox, "geo-polygon": _polygon}


def parse_geo(key, value):
    """One geo filter of a consumer's x-stream-filter table; 406 when it is
    not one LavinMQ would accept."""
    if not isinstance(value, dict):
        raise PreconditionFailed(f"{key} must be a table", 60, 20)
    try:
        return _PARSERS[key](value)
    except _Bad as exc:
        raise PreconditionFailed(f"invalid value for filter {key}: {exc}", 60, 20) from None
