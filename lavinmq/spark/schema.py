"""The columns every lavinmq source produces, as a Spark schema and as the
Arrow schema Spark expects its Python data sources to return."""

PROPERTY_STRINGS = ("content_type", "content_encoding", "message_id", "correlation_id", "type", "app_id",
                    "user_id")
PROPERTY_FIELDS = PROPERTY_STRINGS + ("priority", "delivery_mode", "expiration", "reply_to")

DDL = (
    "offset BIGINT, timestamp TIMESTAMP, exchange STRING, routing_key STRING, "
    "properties STRUCT<content_type: STRING, content_encoding: STRING, message_id: STRING, "
    "correlation_id: STRING, type: STRING, app_id: STRING, user_id: STRING, priority: INT, "
    "delivery_mode: INT, expiration: STRING, reply_to: STRING>, "
    "headers MAP<STRING, STRING>, body BINARY"
)


def spark_schema():
    from pyspark.sql.types import (
        BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType,
    )
    props = StructType([StructField(n, IntegerType() if n in ("priority", "delivery_mode") else StringType())
                        for n in PROPERTY_FIELDS])
    return StructType([
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("exchange", StringType()),
        StructField("routing_key", StringType()),
        StructField("properties", props),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
    ])


def arrow_schema():
    """What pyspark's to_arrow_schema(spark_schema(), timezone="UTC") gives:
    Spark checks a returned batch against it field by field."""
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
