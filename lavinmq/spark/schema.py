"""The columns every lavinmq source produces, as a Spark schema and as the
Arrow schema Spark expects its Python data sources to return.

The decoders (lavinmq/spark/_columns.pyx) build the columns of a message
(record_schema: offset ... body); finish() puts the queue's name in front
and leaves the headers out when includeHeaders=false, per record batch."""

PROPERTY_STRINGS = ("content_type", "content_encoding", "message_id", "correlation_id", "type", "app_id",
                    "user_id")
PROPERTY_FIELDS = PROPERTY_STRINGS + ("priority", "delivery_mode", "expiration", "reply_to")


def spark_schema(include_headers=True):
    from pyspark.sql.types import (
        BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType,
    )
    props = StructType([StructField(n, IntegerType() if n in ("priority", "delivery_mode") else StringType())
                        for n in PROPERTY_FIELDS])
    fields = [
        StructField("queue", StringType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("exchange", StringType()),
        StructField("routing_key", StringType()),
        StructField("properties", props),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
    ]
    return StructType([f for f in fields if include_headers or f.name != "headers"])


def record_schema():
    """The columns of a message, as the decoders build them: what pyspark's
    to_arrow_schema(spark_schema(), timezone="UTC") gives for them (Spark
    checks a returned batch against it field by field)."""
    import pyarrow as pa
    props = pa.struct([pa.field(n, pa.int32() if n in ("priority", "delivery_mode") else pa.string())
                       for n in PROPERTY_FIELDS])
    return pa.schema([
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("exchange", pa.string()),
        pa.field("routing_key", pa.string()),
        pa.field("properties", props),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("body", pa.binary()),
    ])


def arrow_schema(include_headers=True):
    """What a source returns: spark_schema() in Arrow."""
    import pyarrow as pa
    fields = [pa.field("queue", pa.string())] + list(record_schema())
    return pa.schema([f for f in fields if include_headers or f.name != "headers"])


def finish(batch, queue, schema):
    """A record batch of record_schema() -> one of `schema` (arrow_schema()):
    the queue's name (None: unknown) as a column made in Arrow, not per row
    in Python."""
    import pyarrow as pa
    n = batch.num_rows
    name = pa.repeat(pa.scalar(queue, pa.string()), n) if queue is not None else pa.nulls(n, pa.string())
    cols = [name if f.name == "queue" else batch.column(f.name) for f in schema]
    return pa.RecordBatch.from_arrays(cols, schema=schema)
