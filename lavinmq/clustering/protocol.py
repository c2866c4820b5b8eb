"""The replication stream between the leader and a follower.

Handshake (the follower connects to the leader's advertised URI), shaped
as LavinMQ's with a magic of our own, so that a LavinMQ node and ours never
take each other for a peer:

    F->L  MAGIC (8 bytes) | u8 length, the cluster's secret | i32 node id |
          u8 length, the follower's advertised URI (for /api/nodes)
    L->F  u8 0 (accepted) or 1 (refused, then closed)

Then frames both ways: u8 type | u32 length | body (integers little-endian).
Paths are relative to the data directory, '/'-separated.

L->F  LIST        entries of u16 path length, path, u64 size, sha1 of the
                  file's first `size` bytes (a full sync's listing, in chunks)
      LIST_END    u8 pass
      SYNC_FILE   u16, path, u64 offset, u8 last, bytes: a file a full sync
                  sends, written aside and renamed into place with its last chunk
      SYNC_END    u8 pass
      WRITE       u16, path, u64 offset, bytes: written at offset (segment
                  ranges, ack file tails, definitions appended)
      REPLACE     u16, path, bytes: the whole file, written aside and renamed
      DELETE      u16, path: a file, or a directory and all below it
      COMMIT      u16, queue directory, u64 seq, u32 first segment, u32 start,
                  u16 n, n x (u32 segment, u32 end): the follower writes the
                  queue's commit record itself (lavinmq/commit.py), from its
                  own bytes: checksums of what it holds, its own boot id
F->L  REQUEST     u16 path length, path, ... (files a full sync wants)
      REQUEST_END
      ACK         u64: bytes of frames received, applied and on the
                  follower's disk (cumulative)

Unlike LavinMQ's stream, writes carry their offset: a record applied twice
changes nothing, so a full sync's snapshot and the stream that overlaps it
need no exact cut, and a segment range need not know whether the follower
has the file's first bytes yet. There is no compression: on the networks a
cluster runs on, CPU is dearer than bytes (LavinMQ's lz4 is a choice too).
"""
import struct

MAGIC = b"LVNPYR\x01\x00"
MAX_SECRET = 255

LIST, LIST_END, SYNC_FILE, SYNC_END = 1, 2, 3, 4
WRITE, REPLACE, DELETE, COMMIT = 10, 11, 12, 13
REQUEST, REQUEST_END, ACK = 20, 21, 22

HEADER = struct.Struct("<BI")
U16 = struct.Struct("<H")
U64 = struct.Struct("<Q")
OFFSET = struct.Struct("<QB")
COMMIT_HEAD = struct.Struct("<QIIH")
COMMIT_ENTRY = struct.Struct("<II")
LIST_ENTRY_TAIL = struct.Struct("<Q20s")

# the largest frame either side accepts; writes are cut to fit
MAX_FRAME = 8 * 1024 * 1024
CHUNK = 4 * 1024 * 1024


class ProtocolError(Exception):
    pass


def frame(kind, body):
    return HEADER.pack(kind, len(body)) + body


def _path(path):
    raw = path.encode("utf-8", "surrogateescape")
    return U16.pack(len(raw)) + raw


def write_frames(out, path, offset, data):
    """Append WRITE frames for data at offset to the bytearray out."""
    p = _path(path)
    view = memoryview(data)
    pos = 0
    while True:
        chunk = view[pos:pos + CHUNK]
        out += HEADER.pack(WRITE, len(p) + 8 + len(chunk))
        out += p
        out += U64.pack(offset + pos)
        out += chunk
        pos += len(chunk)
        if pos >= len(view):
            return


def replace_frame(path, data):
    return frame(REPLACE, _path(path) + bytes(data))


def delete_frame(path):
    return frame(DELETE, _path(path))


def commit_frame(directory, seq, first, start, ends):
    body = _path(directory) + COMMIT_HEAD.pack(seq, first, start, len(ends))
    body += b"".join(COMMIT_ENTRY.pack(seg, end) for seg, end in ends)
    return frame(COMMIT, body)


def sync_file_frame(path, offset, last, data):
    return frame(SYNC_FILE, _path(path) + OFFSET.pack(offset, 1 if last else 0) + bytes(data))


def list_frames(entries, max_body=1024 * 1024):
    """entries: [(path, size, sha1 digest)] -> LIST frames."""
    out, body = [], bytearray()
    for path, size, digest in entries:
        body += _path(path) + LIST_ENTRY_TAIL.pack(size, digest)
        if len(body) >= max_body:
            out.append(frame(LIST, bytes(body)))
            body = bytearray()
    if body:
        out.append(frame(LIST, bytes(body)))
    return out


def request_frames(paths, max_body=256 * 1024):
    out, body = [], bytearray()
    for path in paths:
        body += _path(path)
        if len(body) >= max_body:
            out.append(frame(REQUEST, bytes(body)))
            body = bytearray()
    if body:
        out.append(frame(REQUEST, bytes(body)))
    return out


# -- decoding -------------------------------------------------------------------------

def read_path(body, pos):
    """-> (path, next position)."""
    if pos + 2 > len(body):
        raise ProtocolError("truncated path")
    n = U16.unpack_from(body, pos)[0]
    end = pos + 2 + n
    if end > len(body):
        raise ProtocolError("truncated path")
    return bytes(body[pos + 2:end]).decode("utf-8", "surrogateescape"), end


def parse_list(body):
    pos, out = 0, []
    while pos < len(body):
        path, pos = read_path(body, pos)
        if pos + LIST_ENTRY_TAIL.size > len(body):
            raise ProtocolError("truncated list entry")
        size, digest = LIST_ENTRY_TAIL.unpack_from(body, pos)
        pos += LIST_ENTRY_TAIL.size
        out.append((path, size, digest))
    return out


def parse_paths(body):
    pos, out = 0, []
    while pos < len(body):
        path, pos = read_path(body, pos)
        out.append(path)
    return out


def parse_write(body):
    """WRITE -> (path, offset, memoryview of the data)."""
    path, pos = read_path(body, 0)
    if pos + 8 > len(body):
        raise ProtocolError("truncated write")
    return path, U64.unpack_from(body, pos)[0], memoryview(body)[pos + 8:]


def parse_sync_file(body):
    path, pos = read_path(body, 0)
    if pos + OFFSET.size > len(body):
        raise ProtocolError("truncated sync file")
    offset, last = OFFSET.unpack_from(body, pos)
    return path, offset, bool(last), memoryview(body)[pos + OFFSET.size:]


def parse_commit(body):
    """-> (directory, seq, first, start, [(segment, end)])."""
    directory, pos = read_path(body, 0)
    if pos + COMMIT_HEAD.size > len(body):
        raise ProtocolError("truncated commit")
    seq, first, start, n = COMMIT_HEAD.unpack_from(body, pos)
    pos += COMMIT_HEAD.size
    if pos + n * COMMIT_ENTRY.size != len(body):
        raise ProtocolError("commit entries do not match their count")
    ends = [COMMIT_ENTRY.unpack_from(body, pos + i * COMMIT_ENTRY.size) for i in range(n)]
    return directory, seq, first, start, ends
