"""Issue 25 item 4: while one tenant runs each attack of the review in
turn (tests/security/hostile_tenant.py), another tenant's confirmed
publishing keeps its p99 confirm latency under 100 ms and loses nothing.
LAVINMQ_HOSTILE_SECONDS sets how long each attack runs (2 s here; the
note's figures come from longer runs).

On a shared machine another process can hold both cores for a tenth of a
second (the baseline, with no attack at all, has shown a 119 ms maximum
at a load of 8): as the performance gate does (benchmarks/gate.py), an
attack (or the baseline) over the latency limit is run again, twice at
most, on a new broker, and fails only if every run is over. A stuck victim
or a lost message fails at once."""
import os

from tests.security.hostile_tenant import ATTACKS, run

LIMIT = 0.1         # seconds, the victim's p99 confirm latency
RERUNS = 2


def _check(name, stats, report):
    assert not stats.get("stuck"), f"the victim got stuck during {name}:\n{report}"
    assert stats["confirmed"] > 0, report
    assert stats["in_queue"] == stats["confirmed"], f"{name}: messages lost:\n{report}"


def test_a_hostile_tenant_does_not_starve_another():
    seconds = float(os.environ.get("LAVINMQ_HOSTILE_SECONDS", "2"))
    lines = []
    result = run(seconds, log=lines.append)
    # a broker that stopped answering ends the run early
    assert set(result["attacks"]) == {"baseline", *(a.__name__ for a in ATTACKS)}, "\n".join(lines)
    over = []
    for name, stats in result["attacks"].items():
        _check(name, stats, "\n".join(lines))
        if stats["p99"] >= LIMIT:
            over.append(name)
    for _ in range(RERUNS):
        if not over:
            break
        lines.append(f"again: {', '.join(over)}")
        again = run(seconds, log=lines.append, only=over)
        assert set(over) <= set(again["attacks"]), "\n".join(lines)
        for name in over:
            _check(name, again["attacks"][name], "\n".join(lines))
        over = [name for name in over if again["attacks"][name]["p99"] >= LIMIT]
    report = "\n".join(lines)
    assert not over, f"p99 confirm latency over {LIMIT * 1000:.0f} ms in every run of {over}:\n{report}"
    print("\n" + report)
