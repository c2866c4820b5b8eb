"""lavinmq: an AMQP 0-9-1 message broker with a Cython hot path."""
__version__ = "0.1.0"
