#!/usr/bin/env python3
"""A newcomer's first `./dev run`, measured: clone the repository into a
temporary directory, run `./dev run` there with its own ports and data
directory, and time it until the AMQP port answers (a Connection.Start);
then stop the broker and report the size of the clone's .venv.

    python3 benchmarks/first_run.py                 # HEAD of this repository
    python3 benchmarks/first_run.py --ref main --json out.json
    python3 benchmarks/first_run.py --local-pip     # with this machine's pip settings

What a user gets: pip runs with no configuration file, no extra indexes or
find-links and no cache (PIP_CONFIG_FILE=/dev/null, PIP_NO_CACHE_DIR=1), so
every wheel comes from the package index as on a new machine; --local-pip
keeps this machine's settings (local wheel directories, its cache). The
clone is of committed history only (--ref): commit what is to be measured.
The CPU time of everything `./dev run` ran is reported beside the wall
clock, since a shared machine stretches the latter. Not a test: nothing
here passes or fails except on an error."""
import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def amqp_answers(port):
    """True once the port speaks AMQP: a protocol header gets Connection.Start
    (a method frame on channel 0, class 10 method 10)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"AMQP\x00\x00\x09\x01")
            head = b""
            while len(head) < 11:
                chunk = s.recv(11 - len(head))
                if not chunk:
                    return False
                head += chunk
            return head[0] == 1 and head[7:11] == b"\x00\x0a\x00\x0a"
    except OSError:
        return False


def tree_size(path):
    total = 0
    for base, _, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(base, f))
            except OSError:
                continue
            total += st.st_blocks * 512
    return total


def user_env(local_pip):
    env = dict(os.environ)
    if not local_pip:
        for k in list(env):
            if k.startswith("PIP_") and k not in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT"):
                del env[k]
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1")
    env.pop("LAVINMQ_EXTRAS", None)
    env.pop("LAVINMQ_VENV", None)
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=ROOT, help="repository to clone (default: this one)")
    ap.add_argument("--ref", default="HEAD", help="commit or branch to measure (default: HEAD)")
    ap.add_argument("--local-pip", action="store_true",
                    help="keep this machine's pip configuration and cache (default: as a new machine)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds to wait for the AMQP port (default: 1200)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary clone")
    ap.add_argument("--json", help="also write the result as JSON to this file")
    opts = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="lavinmq-first-run-")
    clone = os.path.join(tmp, "lavinmq")
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", opts.repo, clone], check=True)
    subprocess.run(["git", "-C", clone, "checkout", "-q", opts.ref], check=True)
    commit = subprocess.run(["git", "-C", clone, "rev-parse", "--short", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    ports = {"amqp": free_port(), "http": free_port(), "metrics": free_port()}
    cmd = ["./dev", "run", "-D", os.path.join(tmp, "data"), "-p", str(ports["amqp"]),
           "--http-port", str(ports["http"]), "--metrics-http-port", str(ports["metrics"]), "--mqtt-port", "0"]
    print(f"first_run: {opts.repo} at {commit} in {clone}; load average {os.getloadavg()[0]:.1f}; "
          f"pip {'as configured here' if opts.local_pip else 'from the index, no cache'}", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=clone, env=user_env(opts.local_pip), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []

    def pump():
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            print(f"  {time.monotonic() - t0:6.1f} s | {line}", flush=True)
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    listening = None
    try:
        while time.monotonic() - t0 < opts.timeout:
            if proc.poll() is not None:
                break
            if amqp_answers(ports["amqp"]):
                listening = time.monotonic() - t0
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        reader.join(5)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    venv = tree_size(os.path.join(clone, ".venv"))
    result = {"commit": commit, "listening_s": None if listening is None else round(listening, 1),
              "cpu_s": round(cpu, 1), "venv_mb": round(venv / 1e6, 1), "pip": "local" if opts.local_pip else "index",
              "load_average_end": round(os.getloadavg()[0], 1), "ports": ports}
    if listening is None:
        print(f"first_run: the AMQP port never answered (exit {proc.returncode}); last lines:", file=sys.stderr)
        print("\n".join(lines[-20:]), file=sys.stderr)
    else:
        print(f"first_run: listening after {listening:.1f} s (CPU {cpu:.1f} s); .venv {venv / 1e6:.0f} MB")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=2)
    if opts.keep:
        print(f"first_run: kept {clone}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if listening is not None else 1


if __name__ == "__main__":
    sys.exit(main())
