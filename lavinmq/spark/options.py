"""The reading options of format("lavinmq"), checked once on the driver.
Where Spark's Kafka source has an option that means the same for streams,
it has the Kafka name (lavinmq/spark/README.md lists them side by side): a
stream queue is a topic of one partition, a stream offset a Kafka offset.

An offset spec, normalized: ("earliest",), ("latest",), ("offset", n) or
("time", ms since 1970). Offset 0 means "from the first there is" (what a
query records for a stream that was empty when it started)."""
import json
import re
import urllib.parse

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
EARLIEST, LATEST = ("earliest",), ("latest",)


def positive_int(options, key, default):
    v = options.get(key)
    if v is None or v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {v!r}") from None
    if n <= 0:
        raise ValueError(f"option {key} must be positive")
    return n


def boolean(options, key, default):
    v = options.get(key)
    if v is None or v == "":
        return default
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(f"option {key} must be true or false, not {v!r}")


def parse_time(text):
    """ms since 1970 from an ISO 8601 time (or a number of ms)."""
    import datetime
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not earliest, latest, an offset or an ISO 8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)


def parse_spec(value, what):
    """One queue's spec: an int (an offset; Kafka's -2 earliest, -1 latest),
    a string (earliest, latest, an offset, an ISO 8601 time), or Kafka's
    per-partition object of the one partition a stream has: {"0": ...}."""
    if isinstance(value, dict):
        if set(value) != {"0"}:
            raise ValueError(f"{what}: a stream has one partition, \"0\" (got {sorted(value)})")
        value = value["0"]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{what}: {value!r} is not an offset, earliest, latest or a time")
    if isinstance(value, str):
        text = value.strip()
        if text in ("earliest", "latest"):
            return (text,)
        if not text.lstrip("-").isdigit():
            return ("time", parse_time(text))
        value = int(text)
    if value == -2:
        return EARLIEST
    if value == -1:
        return LATEST
    if value < 0:
        raise ValueError(f"{what}: offset {value}: offsets start at 1 (-2 is earliest, -1 latest)")
    return ("offset", value)


def per_queue(text, what, parse):
    """A JSON object {queue: value} -> {queue: parse(value, what)}."""
    try:
        d = json.loads(text)
    except ValueError as e:
        raise ValueError(f"option {what} is not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"option {what} must be a JSON object of queue names")
    return {q: parse(v, f"{what}[{q!r}]") for q, v in d.items()}


def time_spec(value, what):
    if isinstance(value, dict) and set(value) == {"0"}:
        value = value["0"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: {value!r} is not a time in ms since 1970")
    return ("time", value)


class ReadOptions:
    def __init__(self, options):
        self.options = options
        self.uri = options.get("uri") or DEFAULT_URI
        named = [k for k in ("queue", "queues", "queuePattern") if options.get(k)]
        if len(named) != 1:
            raise ValueError("one of the options queue (a stream), queues (a comma-separated list, Kafka's "
                             "subscribe) or queuePattern (a regular expression, Kafka's subscribePattern) "
                             f"is required{f', not {len(named)}' if named else ''}")
        self.pattern = None
        if named[0] == "queuePattern":
            try:
                self.pattern = re.compile(options.get("queuePattern"))
            except re.error as e:
                raise ValueError(f"option queuePattern: {e}") from None
            self.queues = None
        else:
            self.queues = sorted({q.strip() for q in options.get(named[0]).split(",") if q.strip()}) \
                if named[0] == "queues" else [options.get("queue")]
            if not self.queues:
                raise ValueError("option queues names no queue")
        self.management_uri = options.get("managementUri") or self._default_management_uri()
        # Kafka's maxRecordsPerPartition; partitionSize is the older name here
        self.partition_size = (positive_int(options, "maxRecordsPerPartition", 0)
                               or positive_int(options, "partitionSize", 250_000))
        self.min_partitions = positive_int(options, "minPartitions", 0) if options.get("minPartitions") else 0
        self.prefetch = min(positive_int(options, "prefetch", 2000), 65535)
        self.max_per_trigger = positive_int(options, "maxOffsetsPerTrigger", 0) \
            if options.get("maxOffsetsPerTrigger") else 0
        self.fail_on_data_loss = boolean(options, "failOnDataLoss", True)
        self.include_headers = boolean(options, "includeHeaders", True)
        self.starting = self._specs("startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp")
        self.ending = self._specs("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
        for name, spec in (self.ending[1] or {}).items():
            if spec == EARLIEST:
                raise ValueError(f"endingOffsets[{name!r}]: earliest is not an end (as in Spark's Kafka source)")
        if self.ending[0] == EARLIEST:
            raise ValueError("endingOffsets: earliest is not an end (as in Spark's Kafka source)")

    def _default_management_uri(self):
        """The management API next to the AMQP listener, with its credentials."""
        u = urllib.parse.urlparse(self.uri)
        auth = f"{u.username or 'guest'}:{u.password or 'guest'}@"
        return f"http://{auth}{u.hostname or '127.0.0.1'}:15672"

    def _specs(self, offsets_key, by_ts_key, ts_key):
        """(global spec or None, {queue: spec} or None), by the precedence
        of Spark's Kafka source: *Timestamp, then *OffsetsByTimestamp, then
        *Offsets."""
        o = self.options
        if o.get(ts_key):
            try:
                return ("time", int(o.get(ts_key))), None
            except ValueError:
                raise ValueError(f"option {ts_key} must be ms since 1970, not {o.get(ts_key)!r}") from None
        if o.get(by_ts_key):
            return None, self._check_names(per_queue(o.get(by_ts_key), by_ts_key, time_spec), by_ts_key)
        text = o.get(offsets_key)
        if text and text.strip().startswith("{"):
            return None, self._check_names(per_queue(text, offsets_key, parse_spec), offsets_key)
        return (parse_spec(text, offsets_key) if text else None), None

    def _check_names(self, specs, what):
        for name in specs:
            if self.queues is not None and name not in self.queues:
                raise ValueError(f"option {what} names queue {name!r}, which is not among the queues read "
                                 f"({', '.join(self.queues)})")
            if self.pattern is not None and not self.pattern.fullmatch(name):
                raise ValueError(f"option {what} names queue {name!r}, which queuePattern does not match")
        return specs

    def spec(self, which, queue, default):
        """The starting or ending spec of one queue."""
        overall, by_queue = self.starting if which == "starting" else self.ending
        if by_queue is not None:
            return by_queue.get(queue, default)
        return overall or default

    def subscribed(self):
        """The queues to read now: the list, or the streams whose names
        queuePattern matches (whole names, as Java's Pattern.matches), from
        the management API."""
        if self.queues is not None:
            return list(self.queues)
        return sorted(q for q in list_streams(self.management_uri, self.uri) if self.pattern.fullmatch(q))


def list_streams(management_uri, amqp_uri):
    """Names of the stream queues of the AMQP URI's vhost, from the
    management API (AMQP has no way to list queues)."""
    import base64
    import urllib.request
    from lavinmq.spark.amqp import parse_uri
    vhost = parse_uri(amqp_uri)[4]
    u = urllib.parse.urlparse(management_uri)
    base = f"{u.scheme}://{u.hostname}:{u.port or 15672}{u.path.rstrip('/')}"
    url = f"{base}/api/queues/{urllib.parse.quote(vhost, safe='')}?columns=name,type"
    req = urllib.request.Request(url)
    user, password = urllib.parse.unquote(u.username or "guest"), urllib.parse.unquote(u.password or "guest")
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            queues = json.load(r)
    except OSError as e:
        raise ConnectionError(f"queuePattern lists queues through the management API at {base} "
                              f"(option managementUri): {e}") from None
    return [q["name"] for q in queues if q.get("type") == "stream"]
