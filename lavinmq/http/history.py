"""RabbitMQ's range parameters on single objects and the overview:
`lengths_age`/`lengths_incr` (queue lengths), `msg_rates_age`/
`msg_rates_incr` (message counters), `data_rates_age`/`data_rates_incr`
(connection octets), ages and increments in seconds. Each asked-for
`X_details` gets `samples` ([{"sample": v, "timestamp": ms}, ...], newest
first, counters as running totals), `avg_rate` and `avg`, from the
sampler's ring buffers (stats.py)."""
import time

from lavinmq.http.helpers import HTTPError
from lavinmq.http import stats

MAX_SAMPLES = 500       # as RabbitMQ's ?MAX_RANGE

# what each range parameter covers: JSON path of the count -> sampled field
QUEUE_LENGTHS = {("messages",): "messages", ("messages_ready",): "messages_ready",
                 ("messages_unacknowledged",): "messages_unacknowledged"}
QUEUE_RATES = {("message_stats", f): f for f in ("publish", "deliver", "get", "deliver_get", "ack", "redeliver")}
OVERVIEW_LENGTHS = {("queue_totals",) + k: v for k, v in QUEUE_LENGTHS.items()}
EXCHANGE_RATES = {("message_stats", f): f for f in ("publish_in", "publish_out")}
CHANNEL_RATES = {("message_stats", f): f for f in ("publish", "deliver", "ack")}
CONNECTION_DATA = {("send_oct",): "send_oct", ("recv_oct",): "recv_oct"}


def parse_range(request, prefix):
    """(age_s, incr_s) or None when the request does not ask for it."""
    age, incr = request.query.get(prefix + "_age"), request.query.get(prefix + "_incr")
    if age is None or incr is None:
        return None
    try:
        a, i = int(age), int(incr)
    except ValueError:
        a = i = 0
    if a <= 0 or i <= 0 or a // i > MAX_SAMPLES:
        raise HTTPError(400, f"Invalid range parameters: age {age}, incr {incr}")
    return a, i


def timestamps(age, incr, ceil):
    """Sample times, newest first, on multiples of incr as RabbitMQ aligns
    them (lengths round the newest up, rates round it down)."""
    step = incr * 1000
    now = int(time.time() * 1000)
    last = (now // step) * step
    if ceil and last != now:
        last += step
    return [last - k * step for k in range(age // incr + 1)]


def augment(request, out, key, obj=None, **groups):
    """Add samples to `out` for each group asked for. groups: prefix ->
    {path: field}, e.g. lengths=QUEUE_LENGTHS."""
    wanted = {prefix: (rng, paths) for prefix, paths in groups.items()
              if (rng := parse_range(request, prefix)) is not None}
    if not wanted:
        return out
    sampler = stats.sampler()
    s = stats.series_for(key, obj)
    for prefix, ((age, incr), paths) in wanted.items():
        ts = timestamps(age, incr, ceil=prefix == "lengths")
        if sampler is None or s is None:
            picked, values = [], {f: [] for f in paths.values()}
        else:
            picked, values = sampler.history(s, list(paths.values()), ts)
        for path, field in paths.items():
            container = out
            for part in path[:-1]:
                container = container.setdefault(part, {})
            rate = sampler.rate(s, field) if s is not None else 0.0
            details = container.setdefault(path[-1] + "_details", {"rate": round(rate, 1)})
            samples = [{"sample": v, "timestamp": t} for v, t in zip(values[field], picked)]
            details["samples"] = samples
            if len(samples) > 1:
                newest, oldest = samples[0], samples[-1]
                dt = newest["timestamp"] - oldest["timestamp"]
                details["avg_rate"] = round((newest["sample"] - oldest["sample"]) * 1000 / dt, 2) if dt else 0.0
                details["avg"] = round(sum(x["sample"] for x in samples) / len(samples), 2)
    return out
