"""amqp091-go acking each delivery (`d.Ack(false)`), as most Go services
consume, against two brokers side by side, alternating: the consumed rate
at prefetch 10, 100 and 1,000 (issue 43). The Go program
(benchmarks/go_ack_each/main.go: a publisher keeping a backlog and the
consumer) is built here in GOPATH mode against Debian's
golang-github-rabbitmq-amqp091-go-dev (apt install golang-go
golang-github-rabbitmq-amqp091-go-dev).

    python benchmarks/go_ack_each.py --ours amqp://guest:guest@127.0.0.1:5672/ \\
                                     --other amqp://guest:guest@127.0.0.1:5682/ --repeat 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOPATH = "/usr/share/gocode"


def build(out):
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH,
               GOCACHE=os.path.join(tempfile.gettempdir(), "lavinmq-go-cache"))
    subprocess.run(["go", "build", "-o", out, "."], cwd=os.path.join(HERE, "go_ack_each"), env=env, check=True)


def run(binary, uri, prefetch, seconds):
    out = subprocess.run([binary, "-uri", uri, "-prefetch", str(prefetch), "-seconds", str(seconds)],
                         capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return json.loads(out.stdout.strip().splitlines()[-1])["consumed_per_s"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--other", required=True)
    ap.add_argument("--other-name", default="other")
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--prefetch", type=int, action="append", help="default: 10, 100, 1000")
    opts = ap.parse_args(argv)
    binary = os.path.join(tempfile.gettempdir(), "lavinmq-go-ack-each")
    build(binary)
    print(f"{'prefetch':>8}  {'lavinmq':>10}  {opts.other_name:>10}  ratio")
    for p in opts.prefetch or [10, 100, 1000]:
        ours, other = [], []
        for _ in range(opts.repeat):            # alternating: drift on a shared box hits both
            ours.append(run(binary, opts.ours, p, opts.seconds))
            other.append(run(binary, opts.other, p, opts.seconds))
        a, b = statistics.median(ours), statistics.median(other)
        print(f"{p:>8}  {a:>10,.0f}  {b:>10,.0f}  {a / b:5.2f}x   (runs: {ours} / {other})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
