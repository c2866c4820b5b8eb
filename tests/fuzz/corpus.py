"""Seed frames and mutations for fuzzing the connection. Frames are encoded
with pamqp (an independent codec), then damaged by seeded random mutators
that aim at the parser's edges: sizes, frame ends, ids, field tables."""
import random
import struct

from pamqp import body as pbody, commands as C, frame, header

QUEUES = ["fq1", "fq2", "fq3", ""]
EXCHANGES = ["", "amq.direct", "amq.topic", "amq.fanout", "amq.headers", "fx1"]


def marshal(method, channel):
    return frame.marshal(method, channel)


def deep_table(depth):
    t = {"leaf": 1}
    for i in range(depth):
        t = {"t": t} if i % 2 else {"a": [t, 1]}
    return t


def content(ch, exchange, key, body, props=None, frame_max=4096, mandatory=False):
    out = [marshal(C.Basic.Publish(exchange=exchange, routing_key=key, mandatory=mandatory), ch),
           frame.marshal(header.ContentHeader(0, len(body), props or C.Basic.Properties()), ch)]
    for i in range(0, len(body), frame_max - 8):
        out.append(frame.marshal(pbody.ContentBody(body[i:i + frame_max - 8]), ch))
    return out


def seed_frames(rng):
    """A plausible client conversation on a few channels, as separate frames."""
    ch = rng.choice([1, 1, 1, 2, 3])
    q = rng.choice(QUEUES)
    ex = rng.choice(EXCHANGES)
    args = rng.choice([{}, {"x-max-priority": 5}, {"x-message-ttl": 1000}, {"x-priority": 2},
                       {"x-match": "any", "a": 1}, deep_table(rng.randint(1, 40))])
    props = rng.choice([None, C.Basic.Properties(delivery_mode=2, headers={"h": rng.randint(0, 9)}),
                        C.Basic.Properties(content_type="text/plain", priority=rng.randint(0, 9),
                                           expiration=str(rng.randint(0, 5000)))])
    body = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 10, 100, 5000])))
    pick = rng.randrange(24)
    if pick == 0:
        return [marshal(C.Channel.Open(), ch)]
    if pick == 1:
        return [marshal(C.Channel.Close(200, "bye", 0, 0), ch)]
    if pick == 2:
        return [marshal(C.Channel.CloseOk(), ch)]
    if pick == 3:
        return [marshal(C.Queue.Declare(queue=q, durable=rng.random() < .3,
                                        exclusive=rng.random() < .2, auto_delete=rng.random() < .2,
                                        passive=rng.random() < .1, arguments=args), ch)]
    if pick == 4:
        return [marshal(C.Exchange.Declare(exchange="fx1", exchange_type=rng.choice(
            ["direct", "topic", "fanout", "headers", "x-nope"]), arguments=args), ch)]
    if pick == 5:
        return [marshal(C.Queue.Bind(queue=q, exchange=ex, routing_key=rng.choice(["k", "#", "a.*"]),
                                     arguments=args), ch)]
    if pick == 6:
        return [marshal(C.Queue.Unbind(queue=q, exchange=ex, routing_key="k"), ch)]
    if pick == 7:
        return [marshal(C.Basic.Consume(queue=q, consumer_tag=rng.choice(["", "c1", "c2"]),
                                        no_ack=rng.random() < .5, exclusive=rng.random() < .1,
                                        arguments=args), ch)]
    if pick == 8:
        return [marshal(C.Basic.Cancel(consumer_tag=rng.choice(["c1", "c2", "x"])), ch)]
    if pick == 9:
        return [marshal(C.Basic.Get(queue=q, no_ack=rng.random() < .5), ch)]
    if pick in (10, 11):
        return [marshal(C.Basic.Ack(delivery_tag=rng.randint(0, 20), multiple=rng.random() < .3), ch)]
    if pick == 12:
        return [marshal(C.Basic.Nack(delivery_tag=rng.randint(0, 20), multiple=rng.random() < .3,
                                     requeue=rng.random() < .5), ch)]
    if pick == 13:
        return [marshal(C.Basic.Reject(delivery_tag=rng.randint(0, 20), requeue=rng.random() < .5), ch)]
    if pick == 14:
        return [marshal(C.Basic.Qos(prefetch_count=rng.randint(0, 5), global_=rng.random() < .5), ch)]
    if pick == 15:
        return [marshal(rng.choice([C.Confirm.Select(), C.Tx.Select(), C.Tx.Commit(), C.Tx.Rollback()]), ch)]
    if pick == 16:
        return [marshal(C.Basic.Recover(requeue=True), ch)]
    if pick == 17:
        return [marshal(C.Queue.Purge(queue=q), ch)]
    if pick == 18:
        return [marshal(C.Queue.Delete(queue=q, if_empty=rng.random() < .3), ch)]
    if pick == 19:
        return [marshal(C.Exchange.Bind(destination="fx1", source=ex, routing_key="k"), ch)]
    if pick == 20:
        return [marshal(C.Channel.Flow(active=rng.random() < .5), ch)]
    if pick == 21:
        return [frame.marshal(C.Connection.Close(200, "bye", 0, 0), 0)]
    return content(ch, ex, rng.choice(["k", q, "a.b"]), body, props, mandatory=rng.random() < .3)


def mutate(rng, data):
    """One damaging edit to a frame's bytes."""
    data = bytearray(data)
    kind = rng.randrange(14)
    if kind == 0 and data:                              # flip bytes anywhere
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.getrandbits(8)
    elif kind == 1 and len(data) > 1:                   # truncate (a frame cut short, then more)
        del data[rng.randrange(1, len(data)):]
    elif kind == 2 and len(data) >= 8:                  # bad frame end
        data[-1] = rng.choice([0, 0xCD, 0xFF])
    elif kind == 3 and len(data) >= 7:                  # lie about the size
        struct.pack_into(">I", data, 3, rng.choice([0, 1, len(data), 1 << 20, 0xFFFFFFFF,
                                                     rng.getrandbits(32)]))
    elif kind == 4 and len(data) >= 3:                  # other channel, incl. above channel_max
        struct.pack_into(">H", data, 1, rng.choice([0, 1, 2, 7, 100, 2049, 65535]))
    elif kind == 5 and data:                            # other frame type
        data[0] = rng.choice([0, 1, 2, 3, 4, 8, 9, 0x41, 0xFF])
    elif kind == 6 and len(data) >= 11:                 # unknown class / method ids
        struct.pack_into(">HH", data, 7, rng.choice([10, 20, 40, 50, 60, 85, 90, 999, 65535]),
                         rng.choice([0, 10, 11, 40, 41, 50, 999]))
    elif kind == 7 and len(data) >= 11:                 # method arguments cut, size kept honest
        cut = rng.randrange(11, len(data)) if len(data) > 12 else 11
        payload = bytes(data[7:cut - 1])
        data = bytearray(data[:3] + struct.pack(">I", len(payload)) + payload + b"\xce")
    elif kind == 8:                                     # random garbage
        data = bytearray(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    elif kind == 9 and len(data) > 8:                   # insert bytes in the payload
        pos = rng.randrange(7, len(data) - 1)
        data[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 8)))
    elif kind == 10 and len(data) > 8:                  # payload bytes set to extremes
        pos = rng.randrange(7, len(data) - 1)
        data[pos] = rng.choice([0, 0x7F, 0x80, 0xFF])
    elif kind == 11:                                    # a content header with a wrong body size
        data = bytearray(frame.marshal(header.ContentHeader(
            0, rng.choice([0, 1, 1 << 40, 0xFFFFFFFFFFFFFFFF]), C.Basic.Properties()), rng.choice([1, 2])))
    elif kind == 12:                                    # a body frame without a header
        data = bytearray(frame.marshal(pbody.ContentBody(b"orphan"), rng.choice([0, 1, 2])))
    else:                                               # a huge field table
        data = bytearray(marshal(C.Queue.Declare(queue="fq1", arguments={
            "k%d" % i: "v" * 100 for i in range(rng.choice([10, 500]))}), 1))
    return bytes(data)


def case(rng, n_frames=None):
    """-> list of byte chunks to feed after a good handshake: a conversation
    with some frames damaged, cut at random read boundaries."""
    frames = []
    for _ in range(n_frames or rng.randint(1, 12)):
        for f in seed_frames(rng):
            frames.append(mutate(rng, f) if rng.random() < 0.25 else f)
    data = b"".join(frames)
    chunks = []
    pos = 0
    while pos < len(data):
        step = rng.choice([len(data), 1, 7, 100, 4096])
        chunks.append(data[pos:pos + step])
        pos += step
    return chunks
