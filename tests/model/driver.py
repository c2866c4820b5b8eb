"""The real side of the model test: a broker to drive (one process, or a
three-node cluster: tests/model/cluster_target.py) and the client that talks
to it (pika over AMQP, urllib over the management API)."""
import base64
import json
import os
import signal
import time
import urllib.error
import urllib.request

import pika

from tests.conftest import BrokerProcess
from tests.model.model import ModelError


# the walk's brokers: a clean stop's grace period (lavinmq/drain.py) of 1 s,
# not 5: a restart while the holder channel keeps messages waits it out
INI = "[main]\nshutdown_drain_timeout = 1\n"


def write_ini(base_dir):
    path = os.path.join(str(base_dir), "model.ini")
    with open(path, "w") as f:
        f.write(INI)
    return path


class SingleNode:
    """One broker process on a data directory of its own (from the tree
    LAVINMQ_MODEL_TREE names, if set: a walk against another version of the
    broker, which may not know the ini's settings: it gets none)."""
    name = "single node"
    reproduce = "tests/model/test_single_node.py -k reproduce"

    def __init__(self, base_dir):
        tree = os.environ.get("LAVINMQ_MODEL_TREE")
        if tree:
            self.broker = BrokerProcess(base_dir / "data", cwd=tree)
        else:
            self.broker = BrokerProcess(base_dir / "data", extra_args=["-c", write_ini(base_dir)])

    def start(self):
        self.broker.start()

    @property
    def url(self):
        return self.broker.url

    @property
    def http_url(self):
        return self.broker.http_url

    def clean_restart(self, pump, during=None):
        """SIGTERM, which must end the process with 0, then start again.
        during() runs once the signal is sent (the client settles what it
        holds in the grace period); pump() lets the client read meanwhile."""
        proc = self.broker.proc
        proc.send_signal(signal.SIGTERM)
        if during is not None:
            during()
        deadline = time.monotonic() + 30
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                raise ModelError(f"the broker ignored SIGTERM for 30 s:\n{self.broker.log_tail()}")
            pump()
        if proc.returncode != 0:
            raise ModelError(f"the broker exited with {proc.returncode} on SIGTERM:\n{self.broker.log_tail()}")
        self.broker.start()

    def kill_restart(self):
        self.broker.kill()
        self.broker.start()

    def stop(self):
        return self.broker.stop(timeout=30)

    def problems(self):
        """What the broker's log says went wrong (tracebacks)."""
        text = self.broker.log_text()
        if "Traceback (most recent call last)" in text:
            at = text.index("Traceback (most recent call last)")
            return "the broker logged a traceback:\n" + text[max(0, at - 2000):at + 4000]
        return None

    def log_tail(self):
        return self.broker.log_tail(30)

    def notes(self):
        return {}


class Client:
    """One AMQP connection (a confirm channel to publish on, a work
    channel, a holder channel that keeps messages unacked across
    operations) and the management API."""

    def __init__(self, target):
        self.target = target
        self.conn = None
        self.pub = self.work = self.holder = None

    def connect(self, timeout=30):
        self.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                params = pika.URLParameters(self.target.url)
                params.blocked_connection_timeout = 30
                params.socket_timeout = 10
                params.stack_timeout = 15
                self.conn = pika.BlockingConnection(params)
                break
            except pika.exceptions.AMQPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.pub = self.conn.channel()
        self.pub.confirm_delivery()
        self.work = self.conn.channel()

    def pump(self):
        """Let pika read what the broker sends (its connection.close on a
        clean stop: answered, the broker need not wait for it)."""
        try:
            if self.conn is not None and self.conn.is_open:
                self.conn.process_data_events(time_limit=0.02)
                return
        except Exception:
            pass
        time.sleep(0.02)

    def close(self):
        if self.conn is not None:
            try:
                if self.conn.is_open:
                    self.conn.close()
            except Exception:
                pass
        self.conn = None
        self.pub = self.work = self.holder = None

    def channel(self):
        """The work channel, opened again if an expected error closed it."""
        if self.work is None or not self.work.is_open:
            self.work = self.conn.channel()
        return self.work

    def publisher(self):
        if self.pub is None or not self.pub.is_open:
            self.pub = self.conn.channel()
            self.pub.confirm_delivery()
        return self.pub

    def holding(self):
        if self.holder is None or not self.holder.is_open:
            self.holder = self.conn.channel()
        return self.holder

    def fresh_channel(self):
        return self.conn.channel()

    def api(self, method, path, body=None, ok=(200, 201, 204)):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.target.http_url + path, data=data, method=method)
        req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            with e:
                status, text = e.code, e.read()
        if status not in ok:
            raise ModelError(f"{method} {path} answered {status}: {text[:500]!r}")
        return json.loads(text) if text else None


def expect_channel_error(fn, code):
    """fn must close the channel with this reply code."""
    try:
        fn()
    except pika.exceptions.ChannelClosedByBroker as e:
        if e.reply_code != code:
            raise ModelError(f"expected reply code {code}, got {e.reply_code} {e.reply_text}") from None
        return
    raise ModelError(f"expected the channel to close with {code}; it did not")
