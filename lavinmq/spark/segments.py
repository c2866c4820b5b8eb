"""spark.read.format("lavinmq-segments").load(PATH): messages straight from
segment files, for offline analysis and backups of any queue type. One
Spark partition per segment file; the same columns as format("lavinmq").

PATH is a queue's directory (it holds msgs.0000000001 ...), or a data
directory / vhost directory with .option("queue", name) (and
.option("vhost", "/")) naming the queue. A data directory copied from a
running broker reads fine: a segment being written ends where its data
ends. Streams have offsets (from their meta.N files); for other queues
`offset` is null and acknowledged messages (acks.N) are left out.

The queue column holds option queue's name (null when PATH is a queue's
directory: its name is not in it).

Options: queue, vhost, maxRecordsPerBatch (default 10000, as Spark's Arrow
batches), includeHeaders (default true)."""
import array
import hashlib
import mmap
import os
import struct

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from lavinmq.spark.schema import spark_schema

META = struct.Struct("<Iqqq")


def sha1(name):
    return hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()


def segment_ids(directory):
    return sorted(int(f[5:]) for f in os.listdir(directory) if f.startswith("msgs.") and f[5:].isdigit())


def queue_dir(path, queue=None, vhost="/"):
    """The directory of the queue's segment files."""
    if not os.path.isdir(path):
        raise ValueError(f"{path}: no such directory")
    if segment_ids(path) and not queue:
        return path
    if not queue:
        raise ValueError(f"{path} holds no segment files: give the queue's directory, or a data directory "
                         f"with .option('queue', name)")
    for candidate in (os.path.join(path, sha1(vhost), sha1(queue)), os.path.join(path, sha1(queue))):
        if os.path.isdir(candidate):
            return candidate
    raise ValueError(f"no queue {queue!r} in vhost {vhost!r} under {path}")


def read_meta(directory, seg_id):
    try:
        with open(os.path.join(directory, "meta.%010d" % seg_id), "rb") as f:
            data = f.read(META.size)
    except FileNotFoundError:
        return None
    return META.unpack(data) if len(data) == META.size else None


class SegmentPartition(InputPartition):
    def __init__(self, path, acks, first_offset):
        super().__init__((path, acks, first_offset))
        self.path = path
        self.acks = acks
        self.first_offset = first_offset


def plan(directory):
    """One partition per segment file, with the offset of its first record
    (-1 for queues that are not streams)."""
    parts = []
    prev = None
    for seg_id in segment_ids(directory):
        path = os.path.join(directory, "msgs.%010d" % seg_id)
        meta = read_meta(directory, seg_id)
        if meta is not None and meta[1] > 0:
            first = meta[1]
        elif prev is not None and prev[1] >= 0 and prev[0] + 1 == seg_id and prev[2]:
            first = prev[1] + prev[2]       # no meta: right after the previous segment
        else:
            first = -1
        parts.append(SegmentPartition(path, os.path.join(directory, "acks.%010d" % seg_id), first))
        prev = (seg_id, first, meta[0] if meta else 0)
    return parts


def read_acks(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return array.array("I")
    positions = array.array("I")
    positions.frombytes(data[:len(data) // 4 * 4])
    return array.array("I", sorted(set(positions)))


def read_segment_file(partition, schema, max_rows=10000, max_bytes=64 << 20):
    """Record batches of one segment file."""
    from lavinmq.spark._columns import Batch, read_segment
    try:
        f = open(partition.path, "rb")
    except FileNotFoundError:
        return                  # dropped by retention since it was planned
    with f:
        size = os.fstat(f.fileno()).st_size
        if size <= 4:
            return
        acks = read_acks(partition.acks)
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        try:
            pos, offset = 0, partition.first_offset
            while pos >= 0:
                b = Batch()
                pos, offset = read_segment(m, b, pos, offset if partition.first_offset >= 0 else -1, acks,
                                           max_rows, max_bytes)
                if b.rows:
                    yield b.record_batch(schema)
                del b
        finally:
            m.close()


class SegmentsDataSource(DataSource):
    @classmethod
    def name(cls):
        return "lavinmq-segments"

    def schema(self):
        return spark_schema((self.options.get("includeHeaders") or "true").lower() != "false")

    def reader(self, schema):
        return SegmentsReader(self.options)


class SegmentsReader(DataSourceReader):
    def __init__(self, options):
        path = options.get("path")
        if not path:
            raise ValueError('load(PATH): the queue directory or the data directory to read')
        self.directory = queue_dir(path, options.get("queue"), options.get("vhost") or "/")
        self.max_rows = int(options.get("maxRecordsPerBatch") or 10000)
        self.queue = options.get("queue")
        self.include_headers = (options.get("includeHeaders") or "true").lower() != "false"

    def partitions(self):
        return plan(self.directory)

    def read(self, partition):
        from lavinmq.spark.schema import arrow_schema, finish, record_schema
        out = arrow_schema(self.include_headers)
        for rb in read_segment_file(partition, record_schema(), self.max_rows):
            yield finish(rb, self.queue, out)
