"""Packaging tests build real artefacts and install them into throwaway
Debian roots (minutes, root needed): they run in their own CI step
(`.ci/run`), or with LAVINMQ_PACKAGING_TESTS=1.

A root is a debootstrap'd bookworm (minbase plus adduser, procps and
systemd, the packages' dependencies and what boots it; no Python), made
once and cached as a tarball in $LAVINMQ_TEST_ROOTS, then unpacked per test
in about a second."""
import fcntl
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from tests.conftest import free_port  # noqa: F401 - the packaging tests import it from here

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("LAVINMQ_TEST_ROOTS", "/var/cache/lavinmq-test-roots")
SUITE = "bookworm"
INCLUDE = "adduser,procps,systemd"
TARBALL = os.path.join(CACHE, f"{SUITE}-minbase-{INCLUDE.replace(',', '-')}.tar")
# a second version of the same build, for the upgrade tests
UPGRADE = "+up1"
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/root",
              "DEBIAN_FRONTEND": "noninteractive"}


def pytest_collection_modifyitems(config, items):
    if os.environ.get("LAVINMQ_PACKAGING_TESTS") == "1":
        # the first test builds the artefacts and the root: minutes, not 120 s
        for item in items:
            if "tests/packaging" in str(item.fspath):
                item.add_marker(pytest.mark.timeout(1200))
        return
    skip = pytest.mark.skip(reason="on purpose: the packaging tests build the .deb/.rpm and install them into "
                                   "Debian roots as root (minutes); .ci/run runs them as a step of their own, "
                                   "LAVINMQ_PACKAGING_TESTS=1 here")
    for item in items:
        if "tests/packaging" in str(item.fspath):
            item.add_marker(skip)


def sh(*cmd, check=True, timeout=900, **kw):
    """Run a command; a failure shows its output."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout[-4000:]}\n"
                             f"{r.stderr[-4000:]}")
    return r


def in_root(root, *cmd, user=None, check=True, **kw):
    """cmd inside the root with a minimal environment, as root or as `user`
    ("name" for name:name, or "name:group")."""
    userspec = [f"--userspec={user if ':' in user else f'{user}:{user}'}"] if user else []
    return sh("chroot", *userspec, str(root), *cmd, env=CHROOT_ENV, check=check, **kw)


def version():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        return re.search(r'^version = "(.+)"', f.read(), re.M).group(1)


@pytest.fixture(scope="session")
def artefacts():
    """The packages as `make` builds them, and the same build packaged as a
    higher version (LAVINMQ_VERSION=<version>+up1) for the upgrade tests."""
    v1, v2 = version(), version() + UPGRADE
    sh("make", "-s", "binary", "deb", "rpm", cwd=ROOT)
    sh("make", "-s", "deb", "rpm", f"LAVINMQ_VERSION={v2}", cwd=ROOT)
    arch, machine = sh("dpkg", "--print-architecture").stdout.strip(), os.uname().machine
    dist = os.path.join(ROOT, "dist")
    out = {"version": [v1, v2],
           "deb": [os.path.join(dist, f"lavinmq_{v}_{arch}.deb") for v in (v1, v2)],
           "rpm": [os.path.join(dist, f"lavinmq-{v}-1.{machine}.rpm") for v in (v1, v2)]}
    for path in out["deb"] + out["rpm"]:
        assert os.path.isfile(path), path
    return out


def base_tarball():
    os.makedirs(CACHE, exist_ok=True)
    with open(TARBALL + ".lock", "w") as lock:        # parallel runs build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(TARBALL):
            work = TARBALL + ".d"
            shutil.rmtree(work, ignore_errors=True)
            sh("debootstrap", "--variant=minbase", f"--include={INCLUDE}", SUITE, work)
            sh("tar", "-C", work, "-cf", TARBALL + ".tmp", ".")
            os.rename(TARBALL + ".tmp", TARBALL)
            shutil.rmtree(work)
    return TARBALL


@pytest.fixture
def root(tmp_path):
    """A fresh Debian root (~250 MB), removed afterwards."""
    path = tmp_path / "root"
    path.mkdir()
    sh("tar", "-C", str(path), "-xf", base_tarball())
    yield path
    shutil.rmtree(path, ignore_errors=True)


def passwd(root, name):
    """The user's /etc/passwd fields in the root, or None."""
    for line in (root / "etc/passwd").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":")
    return None


def wait_for_port(port, proc=None, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"broker exited {proc.returncode}: {proc.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port} after {timeout} s")


def roundtrip(port, queue="packaging-test", leave=b"left in the data dir"):
    """A persistent message through a durable queue with pika; leaves `leave`
    in the queue for the next start to find."""
    import pika
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        ch.basic_publish("", queue, b"hello from the package", pika.BasicProperties(delivery_mode=2))
        _, _, body = ch.basic_get(queue, auto_ack=True)
        assert body == b"hello from the package"
        ch.basic_publish("", queue, leave, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def get_one(port, queue="packaging-test"):
    import pika
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        _, _, body = conn.channel().basic_get(queue, auto_ack=True)
        return body
    finally:
        conn.close()


class ChrootBroker:
    """The installed broker run inside the root as the lavinmq user with the
    unit's ExecStart (without systemd; test_service.py boots one)."""

    def __init__(self, root):
        self.root, self.port = root, free_port()
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(
            ["chroot", "--userspec=lavinmq:lavinmq", str(self.root), "/usr/bin/lavinmq",
             "-c", "/etc/lavinmq/lavinmq.ini", "-D", "/var/lib/lavinmq", "-p", str(self.port),
             "--http-port", "0", "--metrics-http-port", "0", "--mqtt-port", "0"],
            env=CHROOT_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for_port(self.port, self.proc)
        return self

    def stop(self):
        """SIGTERM; the broker must exit 0. Returns its log."""
        self.proc.terminate()
        rc = self.proc.wait(30)
        out = self.proc.stdout.read()
        assert rc == 0, f"broker exited {rc}: {out}"
        assert "Traceback" not in out, out
        return out

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
