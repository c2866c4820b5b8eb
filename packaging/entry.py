"""The frozen binary's entry point: one executable, three commands,
chosen by the name it is called by (lavinmq, lavinmqctl, lavinmqperf are
links to the same file)."""
import os
import sys


def main():
    name = os.path.basename(sys.argv[0])
    if name.startswith("lavinmqctl"):
        from lavinmq.ctl import main as command
    elif name.startswith("lavinmqperf"):
        from lavinmq.perf.cli import main as command
    else:
        from lavinmq.cli import main as command
    sys.exit(command())


if __name__ == "__main__":
    main()
