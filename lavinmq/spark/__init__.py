"""The Spark connector (from a checkout: pip install '.[spark]'): Spark's Python Data
Source API over stream queues and segment files.

    from lavinmq.spark import register
    register(spark)
    spark.readStream.format("lavinmq").option("queue", "events").load()
    spark.read.format("lavinmq-segments").load("/var/lib/lavinmq")

It reads the segment format and speaks AMQP; it never imports the broker."""


def register(spark):
    """Make format("lavinmq") and format("lavinmq-segments") known to a session."""
    from lavinmq.spark.source import register as _register
    _register(spark)


__all__ = ["register"]
