#!/usr/bin/env python3
"""Publishing into a persistent exchange (x-persist-messages) next to the
same direct exchange without it, on one broker, alternating run by run
(compare.py's scenarios and lavinmqperf processes), the median of --repeat:

    python benchmarks/persistent_exchange.py --uri amqp://guest:guest@127.0.0.1:5672/%2F --seconds 10 --repeat 3

Pairs: publish only into a bound queue, one publisher and one consumer,
and publish with nothing bound (the plain exchange drops every message, the
persistent one keeps it)."""
import argparse
import statistics
import sys

from compare import run_or_none

PAIRS = [("direct exchange, publish only", "persistent exchange, publish only"),
         ("direct exchange, 1 pub + 1 con", "persistent exchange, 1 pub + 1 con"),
         ("direct exchange, nothing bound", "persistent exchange, nothing bound")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    opts = ap.parse_args(argv)
    rows = []
    for plain, kept in PAIRS:
        a, b = [], []
        for _ in range(opts.repeat):
            a.append(run_or_none(opts.uri, plain, opts.seconds))
            b.append(run_or_none(opts.uri, kept, opts.seconds))
        med = [statistics.median([x for x in runs if x is not None]) if any(x is not None for x in runs) else None
               for runs in (a, b)]
        rows.append((plain.split(", ", 1)[1], *med, a, b))
        print(f"{plain}: {a} / {kept}: {b}", file=sys.stderr, flush=True)
    print(f"{'scenario':<16}  {'plain':>12}  {'persistent':>12}  {'ratio':>6}   runs (plain / persistent)")
    for name, x, y, a, b in rows:
        ratio = f"{y / x:5.2f}x" if x and y else ""
        print(f"{name:<16}  {x or 0:>12,.0f}  {y or 0:>12,.0f}  {ratio:>6}   {a} / {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
