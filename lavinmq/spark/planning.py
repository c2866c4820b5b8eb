"""Which offsets of which streams each Spark partition reads, on the driver:
ranges per queue cut into partitions (partitionSize, minPartitions), the
share of maxOffsetsPerTrigger each queue gets, and what retention removed
before a range was planned (failOnDataLoss)."""
import math

from pyspark.sql.datasource import InputPartition

from lavinmq.spark.offsets import MISSING, data_loss


class RangePartition(InputPartition):
    """Offsets [start, end) of one stream."""

    def __init__(self, queue, start, end):
        super().__init__((queue, start, end))
        self.queue = queue
        self.start = start
        self.end = end


def checked_ranges(streams, opts, start, end):
    """{queue: (start, end)} -> the ranges still there to read: a range
    that begins below the stream's first offset lost what retention removed
    (an error, or a warning and the rest of it); a deleted queue lost all."""
    out = {}
    for q in sorted(end):
        a, b = start.get(q, 0), end[q]
        if b <= a:
            continue
        bounds = streams.bounds(q)
        if bounds is MISSING:
            data_loss(opts.fail_on_data_loss, q, a, b - 1, "the queue was deleted")
            continue
        first = bounds[0] if bounds else None
        if first is not None and first > a:
            if a > 0:           # 0: "from the first there is", nothing was promised
                data_loss(opts.fail_on_data_loss, q, a, first - 1, f"the stream now starts at {first}")
            a = min(first, b)
        if b > a:
            out[q] = (a, b)
    return out


def partitions(ranges, partition_size, min_partitions=0):
    """Ranges {queue: (start, end)} cut into RangePartitions of at most
    partition_size offsets; with min_partitions, large ranges are cut
    further, each into pieces in proportion to its share of the offsets (as
    Spark's Kafka source does with minPartitions)."""
    total = sum(b - a for a, b in ranges.values())
    out = []
    for q, (a, b) in sorted(ranges.items()):
        n = b - a
        pieces = math.ceil(n / partition_size)
        if min_partitions and total:
            pieces = max(pieces, min(n, round(n * min_partitions / total)))
        pieces = max(pieces, 1)
        step, extra = divmod(n, pieces)
        at = a
        for i in range(pieces):
            size = step + (1 if i < extra else 0)
            out.append(RangePartition(q, at, at + size))
            at += size
    return out


def rate_limit(available, limit):
    """{queue: (start, end)} of what is there -> {queue: end} reading at
    most about `limit` offsets in all, each queue its share in proportion to
    what it has waiting; a queue with anything waiting reads at least one
    (Spark's Kafka source divides maxOffsetsPerTrigger the same way)."""
    total = sum(max(0, b - a) for a, b in available.values())
    if total <= limit:
        return {q: b for q, (a, b) in available.items()}
    out = {}
    for q, (a, b) in available.items():
        n = max(0, b - a)
        share = limit * n / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[q] = a + min(n, take)
    return out
