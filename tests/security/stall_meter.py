"""The longest AMQP round trip while something runs, measured from a
process of its own: threads of the test process (HTTP clients reading
large answers) would otherwise delay the meter itself (the GIL), and what
it measured would not be the broker."""
import subprocess
import sys

PROBE = r"""
import sys, time, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.queue_declare("stall-probe")
print("ready", flush=True)
longest = 0.0
import select
while True:
    t = time.monotonic()
    ch.queue_declare("stall-probe", passive=True)
    longest = max(longest, time.monotonic() - t)
    if select.select([sys.stdin], [], [], 0.01)[0]:
        break
print(longest, flush=True)
conn.close()
"""


class ProcessStallMeter:
    def __init__(self, url):
        self.url = url
        self.longest = None

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE, self.url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc):
        out, _ = self.proc.communicate("stop\n", timeout=60)
        self.longest = float(out.strip())
