from lavinmq.queue.classic import Queue

__all__ = ["Queue", "queue_class", "queue_type"]


def queue_class(arguments):
    """The Python class of a classic queue with these arguments: MQTT
    sessions (x-queue-type mqtt) are classic queues of their own class."""
    if arguments and arguments.get("x-queue-type") == "mqtt":
        from lavinmq.mqtt.session import SessionQueue
        return SessionQueue
    return Queue


def queue_type(q):
    """"stream" or "classic": what a policy's apply-to (streams,
    classic_queues, quorum_queues) and the API's type go by. The one place
    a queue is classified: a queue declared with x-queue-type quorum is a
    classic queue here, as in LavinMQ, until quorum queues of their own
    return "quorum" from it."""
    t = q.arguments.get("x-queue-type") if q.arguments else None
    if isinstance(t, bytes):
        t = t.decode("utf-8", "replace")
    return "stream" if t == "stream" else "classic"
