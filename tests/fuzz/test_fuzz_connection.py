"""Hostile input, in-process: seeded random conversations with damaged
frames against the real connection code (see runner.py for what passes).
FUZZ_CASES / FUZZ_SEED set the size and seed; the long run is
`python -m tests.fuzz.runner --cases 1000000`."""
import os

from tests.fuzz.runner import run

CASES = int(os.environ.get("FUZZ_CASES", "5000"))
SEED = os.environ.get("FUZZ_SEED", "ci")


async def test_fuzzed_conversations_end_in_spec_replies(tmp_path):
    failures = await run(CASES, SEED, str(tmp_path))
    assert not failures, "\n".join(f"case {i} (FUZZ_SEED={SEED}): {why}" for i, why in failures)


# -- property-based: frames built field by field -----------------------------

import asyncio                                  # noqa: E402
import struct                                   # noqa: E402

from hypothesis import HealthCheck, given, settings, strategies as st   # noqa: E402

from lavinmq.amqp.connection import AMQPConnection                    # noqa: E402
from tests.fuzz.runner import HANDSHAKE, check_output                 # noqa: E402
from tests.helpers.inproc import FakeServer, FakeTransport, feed       # noqa: E402

KNOWN = [(10, 50), (20, 10), (20, 40), (40, 10), (50, 10), (50, 20), (60, 10), (60, 20), (60, 40),
         (60, 70), (60, 80), (60, 90), (60, 120), (85, 10), (90, 10), (90, 20)]


@st.composite
def raw_frame(draw):
    ftype = draw(st.sampled_from([1, 1, 1, 2, 3, 8, 0, 9]))
    ch = draw(st.sampled_from([0, 1, 2, 2048, 2049, 65535]))
    if ftype == 1:
        cls, meth = draw(st.sampled_from(KNOWN) | st.tuples(st.integers(0, 65535), st.integers(0, 65535)))
        payload = struct.pack(">HH", cls, meth) + draw(st.binary(max_size=300))
    elif ftype == 2:
        payload = (struct.pack(">HHQ", 60, 0, draw(st.sampled_from([0, 5, 1 << 31, (1 << 64) - 1])))
                   + draw(st.binary(max_size=60)))
    else:
        payload = draw(st.binary(max_size=300))
    size = draw(st.sampled_from([len(payload)] * 6 + [0, len(payload) + 1, 1 << 30]))
    end = draw(st.sampled_from([b"\xce"] * 8 + [b"\x00", b""]))
    return struct.pack(">BHI", ftype, ch, size) + payload + end


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(frames=st.lists(raw_frame(), min_size=1, max_size=8))
def test_any_frames_get_a_spec_answer(tmp_path_factory, frames):
    async def go():
        server = FakeServer(tmp_path_factory.mktemp("h"))
        conn = AMQPConnection(server)
        t = FakeTransport()
        conn.connection_made(t)
        try:
            feed(conn, HANDSHAKE + b"".join(frames))
            await asyncio.sleep(0)
        finally:
            conn.connection_lost(None)
            server.vhosts["/"].close()
        assert check_output(bytes(t.out)) is None
    asyncio.run(go())
