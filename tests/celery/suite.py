"""Celery's own integration suite (`t/integration` of a pinned release) run
against this broker: where it comes from, the services it needs, how it is
run, and what its answers mean.

Celery's code is not in this repository. `obtain()` downloads the release's
source distribution with pip (`pip download celery==VERSION --no-binary
:all:`), checks its sha256 and extracts `t/` and `pyproject.toml` (the
suite's pytest settings); it is kept under .venv between runs. The suite
runs with the installed celery and kombu (pyproject's test extra pins both).

It runs in a pytest process of its own, rooted at the extracted tree (its
conftest, its markers, its reruns of flaky tests), with Celery's pytest
plugin and ours (`celery_plugin.py`: the docker host names three of its
files hard-code pointed at the services started here). The result is read
from its JUnit XML.

Services: the broker under test and Debian's redis-server as the result
backend, each on free loopback ports, started and stopped by the tests.
"""
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET

from tests.conftest import ROOT, free_port

VERSION = "5.6.3"
KOMBU = "5.7.0"
SDIST_SHA256 = "177006bd2054b882e9f01be59abd8529e88879ef50d7918a7050c5a9f4e12912"
CACHE = os.environ.get("LAVINMQ_CELERY_CACHE") or os.path.join(ROOT, ".venv", f"celery-{VERSION}")
REDIS_SERVER = "/usr/bin/redis-server"


def missing():
    """Why the suite cannot run here, or None."""
    try:
        import celery
        import kombu
    except ImportError:
        return "celery is not installed (./dev test installs the test extra)"
    if celery.__version__ != VERSION or kombu.__version__ != KOMBU:
        return f"celery {celery.__version__} and kombu {kombu.__version__} installed, the suite pins " \
               f"{VERSION} and {KOMBU} (./dev setup)"
    if not os.access(REDIS_SERVER, os.X_OK):
        return "redis-server is not installed (apt-get install redis-server; ./dev test does)"
    return None


def obtain():
    """-> the directory holding Celery's t/ and pyproject.toml (downloaded once)."""
    done = os.path.join(CACHE, "tree", ".complete")
    if os.path.exists(done):
        return os.path.dirname(done)
    os.makedirs(CACHE, exist_ok=True)
    name = f"celery-{VERSION}.tar.gz"
    sdist = os.path.join(CACHE, name)
    if not os.path.exists(sdist):
        subprocess.run([sys.executable, "-m", "pip", "download", f"celery=={VERSION}", "--no-binary", ":all:",
                        "--no-deps", "--no-build-isolation", "-q", "-d", CACHE], check=True, timeout=600,
                       stdout=subprocess.DEVNULL)
    with open(sdist, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != SDIST_SHA256:
        os.unlink(sdist)
        raise RuntimeError(f"{name}: sha256 {digest}, expected {SDIST_SHA256}")
    tree = os.path.join(CACHE, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    prefix = f"celery-{VERSION}/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith(prefix + "t/") or m.name == prefix + "pyproject.toml"]
        for m in members:
            m.name = m.name[len(prefix):]
        tar.extractall(tree, members, filter="data")
    open(done, "w").close()
    return tree


def workdir(tree, into, config=None):
    """A copy of the tree to run in (the suite writes nothing else), with
    Celery's own override file (integration-tests-config.json) holding
    `config`."""
    shutil.copytree(tree, into, ignore=shutil.ignore_patterns(".complete"))
    if config:
        import json
        with open(os.path.join(into, "integration-tests-config.json"), "w") as f:
            json.dump(config, f)
    return into


class Redis:
    """Debian's redis-server on a free loopback port, nothing saved."""

    def __init__(self, base_dir):
        self.dir = str(base_dir)
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.proc = None

    def start(self, timeout=20):
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer in {timeout} s")

    def flush(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def environment(amqp_url, http_url, redis_port):
    """What Celery's suite reads: TEST_BROKER, TEST_BACKEND, REDIS_* (and
    our plugin the management API); the venv's bin first on PATH (two of its
    tests start `celery` itself)."""
    env = dict(os.environ)
    for key in [k for k in env if k.startswith(("PYTEST_", "COV_"))]:
        del env[key]
    env.update(TEST_BROKER=amqp_url, TEST_BACKEND=f"redis://127.0.0.1:{redis_port}/0",
               REDIS_HOST="127.0.0.1", REDIS_PORT=str(redis_port), LAVINMQ_CELERY_HTTP=http_url or "",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""), PYTHONDONTWRITEBYTECODE="1")
    return env


def run(tree, selection, env, junit, log_path, timeout, deselect=()):
    """Run Celery's pytest on `selection` (node ids or paths under t/) ->
    its exit status. Output goes to log_path."""
    cmd = [sys.executable, "-m", "pytest", "-c", os.path.join(tree, "pyproject.toml"), "--rootdir", tree,
           "-p", "celery.contrib.pytest", "-p", "tests.celery.celery_plugin", "-p", "no:cacheprovider",
           "-p", "no:randomly", "-o", "addopts=--strict-markers", "-o", "testpaths=t/integration",
           f"--junitxml={junit}", "-o", "junit_family=xunit1", "--durations=15", "-rfEX",
           *[f"--deselect={d}" for d in deselect], *selection]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)     # its workers too
            proc.wait()
            return None


def outcomes(junit):
    """{node id: 'passed' | 'failed' | 'error' | 'skipped' | 'xfailed'}
    from pytest's JUnit XML (xunit1); an xpass counts as passed."""
    out = {}
    root = ET.parse(junit).getroot()
    for case in root.iter("testcase"):
        # classname: the module's dotted path (t.integration.test_x), then its classes
        parts = case.get("classname", "").split(".")
        node = "::".join(["/".join(parts[:3]) + ".py", *parts[3:], case.get("name")])
        kinds = {child.tag: child for child in case}
        if "failure" in kinds:
            out[node] = "failed"
        elif "error" in kinds:
            out[node] = "error"
        elif "skipped" in kinds:
            out[node] = "xfailed" if kinds["skipped"].get("type") == "pytest.xfail" else "skipped"
        else:
            out[node] = "passed"
    return out
