#!/usr/bin/env python3
"""The performance regression gate: the per-message cases of
benchmarks/cases.py against this machine class's committed baseline.

    ./dev bench                      wall clock (pytest-benchmark), this machine's baseline
    ./dev bench --instructions       instructions per message under callgrind (what CI runs)
    ./dev bench --save [...]         measure and write the baseline, on purpose
    ./dev bench --case NAME ...      only these cases

Wall clock: pytest-benchmark, warm-up on, at least 20 rounds, the median,
pinned to one CPU when taskset exists; a case slower than the baseline's
median by more than --threshold (15%) is measured again (twice more) and
counts as a regression only if every run is over. Instruction counts are
close to deterministic (fixed hash seed, no address randomisation, garbage
collector off in the measured calls) and do not depend on what else runs on
the machine, so they are what a shared CI machine can gate on; they miss
what costs time without instructions (cache misses, syscalls).

Baselines: benchmarks/baselines/<machine class>.json (pytest-benchmark's
JSON, median in seconds per round of `messages_per_round` messages, with
`per_message_ns` and, after `--save --end-to-end`, the end-to-end rows of
compare.py in machine_info) and <machine class>.instructions.json (the same
shape, `per_message_instructions`). Exit 1 on a regression, 0 otherwise."""
import argparse
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASELINES = ROOT / "benchmarks" / "baselines"
sys.path.insert(0, str(ROOT))
from benchmarks.cases import CASES  # noqa: E402


def machine_class():
    """arch, CPU count and CPU model: what makes wall-clock figures
    comparable. e.g. x86_64-2cpu-amd-epyc."""
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("model name", "Model name")):
                model = line.split(":", 1)[1]
                break
    except OSError:
        pass
    if not model:           # arm64's /proc/cpuinfo names no model: lscpu does
        try:
            out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
            model = re.search(r"Model name:\s*(.*)", out).group(1)
        except (OSError, AttributeError):
            model = "unknown"
    model = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*|\d+-core", "", model.lower())
    slug = "-".join(re.findall(r"[a-z0-9]+", model))[:40] or "unknown"
    return f"{platform.machine()}-{os.cpu_count()}cpu-{slug}"


def baseline_path(cls, instructions):
    return BASELINES / (f"{cls}.instructions.json" if instructions else f"{cls}.json")


def find_baseline(cls, instructions):
    """This class's baseline; for instruction counts any of the same
    architecture will do (they do not depend on the CPU's speed), named."""
    path = baseline_path(cls, instructions)
    if path.exists() or not instructions:
        return path
    arch = platform.machine()
    others = sorted(BASELINES.glob(f"{arch}-*.instructions.json"))
    return others[0] if others else path


# -- measuring -----------------------------------------------------------

def callgrind(names):
    """{case: instructions per message}, all cases in one callgrind run."""
    if not shutil.which("valgrind"):
        sys.exit("gate: --instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        env = dict(os.environ, PYTHONHASHSEED="0")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
               "--toggle-collect=lavinmq_gate_measured", "--dump-after=lavinmq_gate_measured",
               f"--callgrind-out-file={out}", sys.executable, "-m", "benchmarks.cases", *names]
        if shutil.which("setarch"):
            cmd = ["setarch", platform.machine(), "-R", *cmd]    # the same addresses every run
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"gate: the callgrind run failed:\n{proc.stderr[-3000:]}")
        done = [line.split() for line in proc.stdout.splitlines() if line.strip()]
        totals = []
        for i in range(1, 2 * len(done) + 1):
            text = pathlib.Path(f"{out}.{i}").read_text()
            totals.append(int(re.search(r"^totals:\s*(\d+)", text, re.M).group(1)))
        result = {}
        for k, (name, n) in enumerate(done):
            once, twice = totals[2 * k], totals[2 * k + 1]
            result[name] = round((twice - once) / int(n), 1)     # the fixed cost of a call cancels
        return result


def pytest_benchmark(names, json_out, rounds):
    """Wall clock through pytest-benchmark (bench_gate.py), pinned to one CPU."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "--benchmark-only", f"--benchmark-json={json_out}", "--benchmark-warmup=on",
           f"--benchmark-min-rounds={rounds}", "--benchmark-sort=name",
           *(f"benchmarks/bench_gate.py::test_case[{n}]" for n in names)]
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", str(os.cpu_count() - 1), *cmd]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONHASHSEED="0"),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"gate: the benchmark run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return json.loads(pathlib.Path(json_out).read_text())


def case_of(bench):
    return bench["param"] if bench.get("param") else bench["name"]


def per_message_ns(doc):
    return {case_of(b): b["stats"]["median"] / b["extra_info"]["messages_per_round"] * 1e9
            for b in doc["benchmarks"]}


def instructions_doc(cls, counts):
    """The instruction counts in pytest-benchmark's JSON shape, so the same
    tools read both baselines."""
    return {"machine_info": {"machine_class": cls, "node": platform.node(),
                             "python_version": platform.python_version(), "unit": "instructions"},
            "benchmarks": [{"name": f"test_case[{n}]", "param": n, "group": "instructions",
                            "stats": {"median": v, "rounds": 1},
                            "extra_info": {"messages_per_round": 1, "per_message_instructions": v}}
                           for n, v in sorted(counts.items())]}


def end_to_end_rows(seconds):
    """compare.py's five single-queue rows against a broker started here."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compare import BASELINE_ROWS, run_scenario
    from tests.conftest import BrokerProcess
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(pathlib.Path(tmp) / "data").start()
        try:
            return {name: run_scenario(broker.url, name, seconds) for name in BASELINE_ROWS}
        finally:
            broker.stop()


# -- comparing -------------------------------------------------------------

def compare(base, new, threshold):
    """-> (rows, names over the threshold)."""
    rows, over = [], []
    for name in sorted(new):
        b, v = base.get(name), new[name]
        if b is None:
            rows.append((name, None, v, None, "new case: not in the baseline"))
            continue
        change = (v - b) / b * 100
        verdict = "REGRESSION" if change > threshold else ("faster" if change < -threshold else "ok")
        if verdict == "REGRESSION":
            over.append(name)
        rows.append((name, b, v, change, verdict))
    return rows, over


def print_table(rows, unit):
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'baseline':>12}  {'now':>12}  {'change':>8}  ({unit} per message)")
    for name, b, v, change, verdict in rows:
        bs = f"{b:>12,.1f}" if b is not None else f"{'-':>12}"
        cs = f"{change:>+7.1f}%" if change is not None else f"{'':>8}"
        print(f"{name:<{width}}  {bs}  {v:>12,.1f}  {cs}  {verdict}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    ap.add_argument("--save", action="store_true", help="write this machine class's baseline")
    ap.add_argument("--end-to-end", action="store_true",
                    help="with --save: also record compare.py's five rows (msgs/s) as extra info")
    ap.add_argument("--case", action="append", choices=list(CASES), help="default: all")
    ap.add_argument("--threshold", type=float, default=15.0, help="percent slower that fails (15)")
    ap.add_argument("--rounds", type=int, default=20, help="minimum wall-clock rounds per case (20)")
    ap.add_argument("--retries", type=int, default=2, help="re-measurements of a failing case (2)")
    ap.add_argument("--baseline", type=pathlib.Path, help="compare with this file instead")
    ap.add_argument("--machine-class", default=None, help="override the detected class")
    opts = ap.parse_args(argv)
    names = opts.case or list(CASES)
    cls = opts.machine_class or machine_class()
    unit = "instructions" if opts.instructions else "ns"

    def measure(which):
        if opts.instructions:
            return callgrind(which), None
        with tempfile.TemporaryDirectory() as tmp:
            doc = pytest_benchmark(which, os.path.join(tmp, "bench.json"), opts.rounds)
        return per_message_ns(doc), doc

    new, doc = measure(names)
    if opts.save:
        path = baseline_path(cls, opts.instructions)
        if opts.instructions:
            doc = instructions_doc(cls, new)
        else:
            doc["machine_info"]["machine_class"] = cls
            if opts.end_to_end:
                doc["machine_info"]["end_to_end_msgs_per_s"] = end_to_end_rows(10)
        BASELINES.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"gate: baseline written to {path.relative_to(ROOT)} ({len(new)} cases, {unit})")
        return 0

    path = opts.baseline or find_baseline(cls, opts.instructions)
    if not path.exists():
        print(f"gate: no baseline for machine class {cls} ({path.relative_to(ROOT)}); "
              f"measure one with ./dev bench {'--instructions ' if opts.instructions else ''}--save")
        print_table(compare({}, new, opts.threshold)[0], unit)
        return 0
    base_doc = json.loads(path.read_text())
    base = ({case_of(b): b["stats"]["median"] for b in base_doc["benchmarks"]} if opts.instructions
            else per_message_ns(base_doc))
    print(f"gate: {cls} against {path.relative_to(ROOT)}, threshold {opts.threshold:g}%")
    rows, over = compare(base, new, opts.threshold)
    for attempt in range(opts.retries):
        if not over:
            break
        print(f"gate: measuring again ({attempt + 1}/{opts.retries}): {', '.join(over)}")
        again, _ = measure(over)
        for name in over:               # the best of the runs: noise only ever slows a case
            new[name] = min(new[name], again[name])
        rows, over = compare(base, new, opts.threshold)
    print_table(rows, unit)
    if over:
        print(f"gate: FAILED: {len(over)} case(s) more than {opts.threshold:g}% slower than the baseline: "
              f"{', '.join(over)}. See benchmarks/README.md, 'Reading a failure'.")
        return 1
    print("gate: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
