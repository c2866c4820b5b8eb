from lavinmq.queue import kinds
from lavinmq.queue.classic import Queue

__all__ = ["Queue", "queue_class", "queue_type"]


def queue_class(arguments):
    """The Python class of a queue over a classic store with these
    arguments: quorum queues and MQTT sessions (x-queue-type mqtt) are
    classic queues of their own class."""
    kind = kinds.queue_type(arguments)
    if kind == "quorum":
        from lavinmq.queue.quorum import QuorumQueue
        return QuorumQueue
    if kind == "mqtt":
        from lavinmq.mqtt.session import SessionQueue
        return SessionQueue
    return Queue


def queue_type(q):
    """"classic", "quorum" or "stream": what a policy's apply-to (streams,
    classic_queues, quorum_queues) and the API's type go by, from the one
    classifier (lavinmq/queue/kinds.py). An MQTT session is a classic queue
    here (the API names it mqtt)."""
    kind = kinds.queue_type(q.arguments)
    return "classic" if kind == "mqtt" else kind
