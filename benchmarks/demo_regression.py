#!/usr/bin/env python3
"""Show that the gate catches a regression: build a copy of the tree whose
topic matcher is ~20% slower per message (a spin per routing-key word on a
volatile counter, which the compiler may not drop), run the gate there
against the committed baseline, and print what it said.

    python benchmarks/demo_regression.py [--instructions] [--keep DIR]

Exit 0 when the gate failed on the topic case and on no other case
(the demonstration worked), 1 otherwise."""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOPIC = "lavinmq/_core/_match_topic.pxi"
ANCHOR = "                wh = hash_bytes(rk + pos, end - pos) if words_edges else 0\n"
SPIN = """
cdef extern from *:
    \"\"\"
    static volatile uint64_t lq_demo_sink;
    static inline void lq_demo_spin(uint64_t h, int k) {
        for (int i = 0; i < k; i++) lq_demo_sink += h;
    }
    \"\"\"
    void lq_demo_spin(uint64_t h, int k) noexcept nogil
"""
SPINS_PER_WORD = 22         # +20.7% wall clock, +26.8% instructions on the topic case here


def slowed_copy(dest):
    """The tree with the slowed matcher; only the routing extension is
    rebuilt (mtimes are kept, so the others stay up to date)."""
    # build/ comes along: setuptools judges an extension up to date by its copy
    # in build/lib.*, and without it every extension is compiled again (~90 s)
    ignore = shutil.ignore_patterns(".git", ".venv", "dist", "data", "node_modules", "*.egg-info")
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    path = dest / TOPIC
    src = path.read_text()
    if ANCHOR not in src:
        sys.exit(f"demo: {TOPIC} changed; update ANCHOR in {__file__}")
    src = src.replace(ANCHOR, ANCHOR + f"                lq_demo_spin(wh, {SPINS_PER_WORD})\n", 1)
    path.write_text(SPIN + src)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=dest, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instructions", action="store_true", help="the instruction-count gate (as CI)")
    ap.add_argument("--keep", type=pathlib.Path, help="build the copy here and keep it")
    opts = ap.parse_args(argv)
    tmp = None
    if opts.keep:
        dest = opts.keep
    else:
        tmp = tempfile.TemporaryDirectory()
        dest = pathlib.Path(tmp.name) / "tree"
    try:
        slowed_copy(dest)
        cmd = [sys.executable, "benchmarks/gate.py", "--retries", "1"]
        if opts.instructions:
            cmd.append("--instructions")
        # the copy's gate reads the copy's baselines: the committed ones
        proc = subprocess.run(cmd, cwd=dest, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(dest)))
        print(proc.stdout, end="")
        print(proc.stderr, end="", file=sys.stderr)
        failed = [line for line in proc.stdout.splitlines() if line.rstrip().endswith("REGRESSION")]
        ok = (proc.returncode == 1 and len(failed) == 1
              and failed[0].startswith("route_topic_1000_bindings_10k_keys"))
        print("demo: the gate caught the slowed topic matcher" if ok else
              f"demo: NOT caught as expected (exit {proc.returncode}, regressions: {failed})")
        return 0 if ok else 1
    finally:
        if tmp:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
