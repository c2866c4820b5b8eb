"""What kind a queue is, from its arguments: the one place that says so.

`x-queue-type` picks the kind (RabbitMQ's argument): classic (the default),
quorum, stream, or mqtt (an MQTT session, lavinmq/mqtt). The API's "type",
the queue's class, the global-QoS rule of quorum queues and the policies'
apply-to (classic_queues, quorum_queues, streams; through
lavinmq.queue.queue_type, which counts an MQTT session as a classic queue)
all ask `queue_type`, so a queue is never one kind in one place and another
elsewhere. Declarations
were checked (lavinmq/arguments.py), so anything else is a classic queue
replayed from an older version."""

from lavinmq.arguments import QUEUE_TYPES as KINDS


def queue_type(arguments):
    """'classic', 'quorum', 'stream' or 'mqtt'."""
    t = (arguments or {}).get("x-queue-type")
    if t is None:
        return "classic"
    if isinstance(t, (bytes, bytearray)):
        t = bytes(t).decode("utf-8", "replace")
    return t if t in KINDS else "classic"


def is_quorum(arguments):
    return queue_type(arguments) == "quorum"
