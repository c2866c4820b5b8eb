from lavinmq.queue.classic import Queue

__all__ = ["Queue", "queue_class"]


def queue_class(arguments):
    """The Python class of a classic queue with these arguments: MQTT
    sessions (x-queue-type mqtt) are classic queues of their own class."""
    if arguments and arguments.get("x-queue-type") == "mqtt":
        from lavinmq.mqtt.session import SessionQueue
        return SessionQueue
    return Queue
