"""Issue 25 item 4: while one tenant runs each attack of the review in
turn (tests/security/hostile_tenant.py), another tenant's confirmed
publishing keeps going, loses nothing, and is not held up by the loop.

The issue's figure (p99 under 100 ms) is a measurement, taken with
`python -m tests.security.hostile_tenant` on a quiet machine (the closing
note of issue 25). Here, on 2 cores shared with whatever else runs, the
test holds the broker to a bound that the attacks which stalled the loop
broke before their fixes (oversize frames, regex listing, metrics, policy
churn, odd arguments, ring weights: p99 0.42-3.1 s, or no confirm at all)
and that noise does not reach:
LAVINMQ_HOSTILE_P99_MS, 400 by default (100 for the issue's bound).
LAVINMQ_HOSTILE_SECONDS sets how long each attack runs (2 s here).

A victim that confirms a few hundred messages in 2 s has a p99 close to
its slowest sample: an attack over the bound runs once more, on a fresh
broker, and must keep under it then. A broker that stalls fails both
runs; losses and stuck victims fail at once."""
import os

from tests.security.hostile_tenant import ATTACKS, run


def test_a_hostile_tenant_does_not_starve_another():
    seconds = float(os.environ.get("LAVINMQ_HOSTILE_SECONDS", "2"))
    bound = float(os.environ.get("LAVINMQ_HOSTILE_P99_MS", "400")) / 1000
    lines = []
    result = run(seconds, log=lines.append)
    report = "\n".join(lines)
    # a broker that stopped answering ends the run early: every attack must have run
    assert set(result["attacks"]) == {"baseline", *(a.__name__ for a in ATTACKS)}, report
    slow = []
    for name, stats in result["attacks"].items():
        assert not stats.get("stuck"), f"the victim got stuck during {name}:\n{report}"
        assert stats["confirmed"] > 0, report
        assert stats["in_queue"] == stats["confirmed"], f"{name}: messages lost:\n{report}"
        if stats["p99"] >= bound:
            slow.append(name)
    if slow:
        lines.append(f"over {bound * 1000:.0f} ms: {', '.join(slow)}; once more")
        again = run(seconds, log=lines.append, only=slow)["attacks"]
        report = "\n".join(lines)
        assert set(slow) <= set(again), report
        for name in slow:
            stats = again[name]
            assert not stats.get("stuck"), f"the victim got stuck during {name}:\n{report}"
            assert stats["in_queue"] == stats["confirmed"], f"{name}: messages lost:\n{report}"
            assert stats["p99"] < bound, f"{name}: p99 confirm latency {stats['p99'] * 1000:.0f} ms twice:\n{report}"
    print("\n" + report)
