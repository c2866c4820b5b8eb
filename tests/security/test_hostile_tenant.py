"""Issue 25 item 4: while one tenant runs each attack of the review in
turn (tests/security/hostile_tenant.py), another tenant's confirmed
publishing keeps its p99 confirm latency under 100 ms and loses nothing.
LAVINMQ_HOSTILE_SECONDS sets how long each attack runs (2 s here; the
note's figures come from longer runs).

On 2 shared cores a victim that confirms a few hundred messages in 2 s
has a p99 close to its slowest sample, and CPU taken by other processes
shows up there: an attack whose p99 is over the bound runs once more, on
a fresh broker, and must keep under it then. A broker that stalls fails
both runs; losses and stuck victims fail at once."""
import os

from tests.security.hostile_tenant import run


def test_a_hostile_tenant_does_not_starve_another():
    seconds = float(os.environ.get("LAVINMQ_HOSTILE_SECONDS", "2"))
    lines = []
    result = run(seconds, log=lines.append)
    report = "\n".join(lines)
    slow = []
    for name, stats in result["attacks"].items():
        assert not stats.get("stuck"), f"the victim got stuck during {name}:\n{report}"
        assert stats["confirmed"] > 0, report
        assert stats["in_queue"] == stats["confirmed"], f"{name}: messages lost:\n{report}"
        if stats["p99"] >= 0.1:
            slow.append(name)
    if slow:
        lines.append(f"over 100 ms: {', '.join(slow)}; once more")
        again = run(seconds, log=lines.append, only=slow)["attacks"]
        report = "\n".join(lines)
        for name in slow:
            stats = again[name]
            assert not stats.get("stuck"), f"the victim got stuck during {name}:\n{report}"
            assert stats["in_queue"] == stats["confirmed"], f"{name}: messages lost:\n{report}"
            assert stats["p99"] < 0.1, f"{name}: p99 confirm latency {stats['p99'] * 1000:.0f} ms twice:\n{report}"
    print("\n" + report)
