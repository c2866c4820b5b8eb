from lavinmq.queue.classic import Queue
from lavinmq.queue.kinds import queue_type

__all__ = ["Queue", "queue_class", "queue_type"]


def queue_class(arguments):
    """The Python class of a queue over a classic store with these
    arguments: quorum queues and MQTT sessions (x-queue-type mqtt) are
    classic queues of their own class."""
    kind = queue_type(arguments)
    if kind == "quorum":
        from lavinmq.queue.quorum import QuorumQueue
        return QuorumQueue
    if kind == "mqtt":
        from lavinmq.mqtt.session import SessionQueue
        return SessionQueue
    return Queue
