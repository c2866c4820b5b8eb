"""lavinmq.long_work: the short GIL switch interval (which lets the fsync
threads through while the loop computes) holds only while long work runs.
Set for the whole process it cost confirmed publishing ~20%."""
import asyncio
import sys

from lavinmq import long_work
from lavinmq.vhost import VHost


def test_nested_work_restores_the_interval_once_the_last_ends():
    normal = sys.getswitchinterval()
    assert normal != long_work.BUSY_INTERVAL
    long_work.begin()
    with long_work.running():
        assert sys.getswitchinterval() == long_work.BUSY_INTERVAL
    assert sys.getswitchinterval() == long_work.BUSY_INTERVAL     # the outer one still runs
    long_work.end()
    assert sys.getswitchinterval() == normal
    long_work.end()             # one too many changes nothing
    assert sys.getswitchinterval() == normal


def test_a_policy_pass_over_many_queues_holds_it_only_while_it_runs(tmp_path):
    normal = sys.getswitchinterval()
    vhost = VHost("/", str(tmp_path))
    for i in range(5000):
        vhost.declare_queue(f"q{i}", False, None, False, {})
    seen = []

    async def main():
        loop = asyncio.get_running_loop()

        def look():
            seen.append((vhost.policies.applier.current is not None, sys.getswitchinterval()))
            if vhost.policies.applier.current is not None:
                loop.call_soon(look)
        vhost.policies.set("all", {"pattern": ".*", "apply-to": "queues", "definition": {"max-length": 10}})
        loop.call_soon(look)
        await vhost.policies.applied()
        await asyncio.sleep(0)

    try:
        asyncio.run(main())
        during = [interval for running, interval in seen if running]
        assert during, "the pass ended within its first slice: nothing was measured"
        assert set(during) == {long_work.BUSY_INTERVAL}
        assert sys.getswitchinterval() == normal
        assert vhost.queues["q4999"].policy == "all"
    finally:
        vhost.close()
