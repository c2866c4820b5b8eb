from lavinmq.queue.classic import Queue

__all__ = ["Queue"]
