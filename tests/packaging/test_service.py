"""lavinmq.service under a real systemd: a fresh Debian root booted with
systemd-nspawn, `apt-get install lavinmq` run inside it. The package starts
the service (Type=notify: active only once the broker said READY), reload
sends SIGHUP, a killed broker is restarted, remove stops it."""
import json
import os
import subprocess
import time
import urllib.request

import pytest

from tests.packaging.conftest import CHROOT_ENV, free_port, get_one, roundtrip, sh, wait_for_port
from tests.packaging.test_deb import publish_repo

NSPAWN = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit"]


class Booted:
    """The root booted as a container sharing the host's network; commands
    run inside it through nsenter."""

    def __init__(self, root):
        self.root = root

    def __enter__(self):
        self.proc = subprocess.Popen([*NSPAWN, "--console=read-only", "-D", str(self.root), "--boot"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.proc.stdout.read()
            children = sh("pgrep", "-P", str(self.proc.pid), check=False).stdout.split()
            if children and self.run("systemctl", "is-system-running", check=False).stdout.strip() in (
                    "running", "degraded"):
                break
            assert time.monotonic() < deadline, "the container did not boot in 60 s"
            time.sleep(0.5)
        return self

    def run(self, *cmd, check=True):
        pid1 = sh("pgrep", "-P", str(self.proc.pid)).stdout.split()[0]
        return sh("nsenter", "-t", pid1, "-a", "env", "-i", *(f"{k}={v}" for k, v in CHROOT_ENV.items()),
                  *cmd, check=check, timeout=120)

    def show(self, *props):
        out = self.run("systemctl", "show", "lavinmq", *(f"-p{p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines())

    def wait_state(self, state, timeout=30, **props):
        deadline = time.monotonic() + timeout
        while True:
            now = self.show("ActiveState", *props)
            if now["ActiveState"] == state and all(now[k] == v for k, v in props.items()):
                return now
            assert time.monotonic() < deadline, f"lavinmq.service is {now}, not {state} {props}\n" + \
                self.run("journalctl", "-u", "lavinmq", "--no-pager", check=False).stdout
            time.sleep(0.2)

    def journal(self):
        return self.run("journalctl", "-u", "lavinmq", "--no-pager", "-o", "cat").stdout

    def __exit__(self, *exc):
        self.proc.terminate()             # nspawn halts the container on SIGTERM
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def bootable(root):
    # an environment that cannot run containers at all is not a failure of ours
    r = sh(*NSPAWN, "-D", str(root), "/bin/true", check=False, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"systemd-nspawn cannot run a container here: {r.stderr.strip()[:200]}")
    return root


def test_service_under_systemd(bootable, artefacts):
    root = bootable
    amqp, http = free_port(), free_port()
    # an admin's drop-in: other ports than 5672/15672/15692, which the host may use
    dropin = root / "etc/systemd/system/lavinmq.service.d"
    dropin.mkdir(parents=True)
    (dropin / "ports.conf").write_text(
        "[Service]\nExecStart=\nExecStart=/usr/bin/lavinmq -c /etc/lavinmq/lavinmq.ini -D /var/lib/lavinmq "
        f"-p {amqp} --http-port {http} --metrics-http-port 0 --amqps-port 0 --https-port 0 --mqtt-port 0 --mqtts-port 0\n")
    publish_repo(root, artefacts["deb"][0])
    with Booted(root) as box:
        box.run("apt-get", "install", "-y", "-q", "lavinmq")
        # started by the package; active only after READY=1
        st = box.wait_state("active", SubState="running")
        props = box.show("Type", "NRestarts", "MainPID", "ExecMainStartTimestampMonotonic",
                         "ActiveEnterTimestampMonotonic", "StatusText", "User")
        assert props["Type"] == "notify" and props["User"] == "lavinmq"
        assert props["StatusText"] == f"listening on 127.0.0.1:{amqp}"
        ready = (int(props["ActiveEnterTimestampMonotonic"]) - int(props["ExecMainStartTimestampMonotonic"])) / 1e6
        wait_for_port(amqp)
        roundtrip(amqp)
        req = urllib.request.Request(f"http://127.0.0.1:{http}/api/overview",
                                     headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
        assert json.load(urllib.request.urlopen(req, timeout=10))["product_name"] == "LavinMQ"
        out = box.run("lavinmqctl", "-q", "list_users").stdout
        assert out.startswith("guest\t"), out

        # the hardening options hold with the broker running under them
        out = box.run("systemd-analyze", "security", "--no-pager", "lavinmq.service").stdout
        score = float(out.split("Overall exposure level for lavinmq.service:")[1].split()[0])
        assert score <= 2.0, out

        box.run("systemctl", "reload", "lavinmq")
        deadline = time.monotonic() + 10
        while "config reloaded" not in box.journal():
            assert time.monotonic() < deadline, box.journal()
            time.sleep(0.2)

        # Restart=on-failure
        box.run("kill", "-KILL", props["MainPID"])
        box.wait_state("active", NRestarts="1", SubState="running")
        assert box.show("MainPID")["MainPID"] != props["MainPID"]
        wait_for_port(amqp)
        assert get_one(amqp) == b"left in the data dir"

        # an upgrade restarts the running service on the new version
        before = box.show("MainPID")["MainPID"]
        roundtrip(amqp)
        publish_repo(root, artefacts["deb"][1])
        box.run("apt-get", "install", "-y", "-q", "lavinmq")
        box.wait_state("active", SubState="running")
        assert box.show("MainPID")["MainPID"] != before
        wait_for_port(amqp)
        assert get_one(amqp) == b"left in the data dir"
        # (the same build packaged as a higher version: the binary's own --version is unchanged)
        assert box.run("dpkg-query", "-W", "-f=${Version}", "lavinmq").stdout == artefacts["version"][1]

        # remove stops it; the data stays until purge
        box.run("apt-get", "remove", "-y", "-q", "lavinmq")
        assert box.run("systemctl", "is-active", "lavinmq", check=False).stdout.strip() in ("inactive", "unknown")
        journal = box.journal()
        assert "Traceback" not in journal, journal
        assert os.path.exists(root / "var/lib/lavinmq/users.json")
    print(f"\nsystemd-analyze security (booted): {score}; exec to READY {ready:.2f} s")
