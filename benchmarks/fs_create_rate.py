"""What a durable queue.declare asks of the filesystem, without the broker:
make a directory and a small file in it (the queue's commit record), N times,
under --dir (default: a temporary directory under /tmp). Run it next to
`lavinmqperf queue-count --durable` to tell the broker's declare rate from the
disk's: on a VM the same probe ranges over 10x from one minute to the next.

    python benchmarks/fs_create_rate.py [-n 5000] [--dir DIR]
"""
import argparse
import os
import shutil
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5000)
    ap.add_argument("--dir", default="/tmp")
    opts = ap.parse_args()
    root = tempfile.mkdtemp(dir=opts.dir, prefix="fs-create-rate-")
    try:
        started = time.perf_counter()
        for i in range(opts.n):
            d = os.path.join(root, "%040x" % i)
            os.mkdir(d)
            fd = os.open(os.path.join(d, "commit"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, b"\0" * 64, 0)
            finally:
                os.close(fd)
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"mkdir + create + write: {elapsed / opts.n * 1e6:.0f} us each, {opts.n / elapsed:,.0f}/s")


if __name__ == "__main__":
    main()
