"""Broker-wide counters the management API reports as RabbitMQ does:
object churn since start (connections, channels, queues opened and
closed), when queues and channels last saw traffic, and the event loop's
lag. Counted once per object or per sample, never per message."""
import collections

COUNTS = collections.Counter()   # connection_created, channel_closed, queue_declared, ...
IDLE_SINCE = {}                  # id(queue or channel) -> epoch seconds of its last activity
LOOP_LAG_MS = 0                  # how late the last stats sample ran (the run queue's meaning here)


def count(event, n=1):
    COUNTS[event] += n
