"""Broker fixtures: the real server as a subprocess on a free port with a
temporary data directory. LAVINMQ_TEST_URL points the suite at another
broker instead (e.g. RabbitMQ, to check what a test expects);
LAVINMQ_TEST_LOOP=asyncio|uvloop picks the broker's event loop."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_given_ports = set()


def free_port():
    """A port nothing listens on, and one this process has not handed out
    before: the kernel may offer the port it just released again, and a broker
    given it for AMQP and for HTTP fails to start (seen in CI)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given_ports:
            _given_ports.add(port)
            return port


def unique(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class BrokerProcess:
    external = False

    def __init__(self, data_dir, port=None, extra_args=(), tls=False, preexec_fn=None, command=None, mqtt=False, cwd=ROOT):
        self.host = "127.0.0.1"
        self.command = list(command or [sys.executable, "-m", "lavinmq"])   # or a frozen binary
        self.cwd = cwd          # `-m lavinmq` runs the tree it is started in
        self.port = port or free_port()
        self.data_dir = str(data_dir)
        self.extra_args = list(extra_args)
        self.preexec_fn = preexec_fn
        # TLS listeners are named too: off (0) unless the test brings a
        # certificate (tests/security/conftest.py makes them)
        self.amqps_port = free_port() if tls else 0
        self.https_port = free_port() if tls else 0
        # MQTT (1883 by default) only for the tests that use it: off (0) otherwise
        self.mqtt_port = free_port() if mqtt else 0
        self.mqtts_port = free_port() if mqtt and tls else 0
        self.proc = None
        self.log_path = os.path.join(self.data_dir + ".log")
        self.url = f"amqp://guest:guest@{self.host}:{self.port}/%2F"
        self.http_port = free_port()
        self.http_url = f"http://{self.host}:{self.http_port}"

    def start(self, timeout=30):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.command, "-D", self.data_dir, "-p", str(self.port),
             "--amqp-bind", self.host, "--http-bind", self.host, "--http-port", str(self.http_port),
             "--metrics-http-port", "0", "--amqps-port", str(self.amqps_port),
             "--https-port", str(self.https_port), "--mqtt-port", str(self.mqtt_port),
             "--mqtts-port", str(self.mqtts_port), "-l", "info", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd, preexec_fn=self.preexec_fn)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not start in {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout=15):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"broker ignored SIGTERM for {timeout}s:\n{self.log_tail()}")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def restart(self):
        rc = self.stop()
        assert rc == 0, f"broker exited with {rc}:\n{self.log_tail()}"
        return self.start()

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines=40):
        return "\n".join(self.log_text().splitlines()[-lines:])

    def check_clean(self):
        text = self.log_text()
        assert "Traceback (most recent call last)" not in text, f"broker logged a traceback:\n{text[-5000:]}"


class ExternalBroker:
    external = True

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.url = url
        self.host = u.hostname
        self.port = u.port or 5672
        self.data_dir = None


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    url = os.environ.get("LAVINMQ_TEST_URL")
    if url:
        yield ExternalBroker(url)
        return
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield b
    rc = b.stop()
    b.check_clean()
    assert rc == 0, f"broker exited with {rc}:\n{b.log_tail()}"


@pytest.fixture
def fresh_broker(tmp_path):
    if os.environ.get("LAVINMQ_TEST_URL"):
        pytest.skip("needs its own broker process")
    b = BrokerProcess(tmp_path / "data").start()
    yield b
    if b.proc.poll() is None:
        b.stop()
    b.check_clean()


@pytest.fixture
def name():
    return unique()
