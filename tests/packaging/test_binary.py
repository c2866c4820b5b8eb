"""The frozen binary (make binary): one executable that is the broker,
lavinmqctl and lavinmqperf, runs without the build's Python, and the
systemd unit that starts it."""
import os
import shutil
import socket
import subprocess
import time

import pika
import pytest

from tests.conftest import free_port
from tests.packaging.conftest import ROOT, in_root, version

DIST = os.path.join(ROOT, "dist")


@pytest.fixture(scope="module")
def binary():
    subprocess.run(["make", "binary"], cwd=ROOT, check=True, timeout=900)
    path = os.path.join(DIST, "lavinmq")
    assert os.access(path, os.X_OK)
    return path


def clean_env(tmp_path):
    # no Python on PATH, no virtualenv, nothing from the build
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}


def start_up(path, env):
    """Best of five `--version` runs, in seconds."""
    best = 60.0
    for _ in range(5):
        t0 = time.monotonic()
        out = subprocess.run([path, "--version"], env=env, capture_output=True, text=True, timeout=30)
        best = min(best, time.monotonic() - t0)
        assert out.returncode == 0 and out.stdout == f"lavinmq {version()}\n", out
    return best


def test_version_size_and_start_up(binary, tmp_path):
    onedir = os.path.join(DIST, "lavinmq-dir")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(onedir) for f in files)
    assert os.path.getsize(binary) < 40e6 and size < 80e6
    onefile_s = start_up(binary, clean_env(tmp_path))
    onedir_s = start_up(os.path.join(onedir, "lavinmq"), clean_env(tmp_path))
    assert onedir_s < onefile_s, "the packages install onedir because it starts faster"
    print(f"\nonefile {os.path.getsize(binary) / 1e6:.1f} MB, --version {onefile_s:.2f} s; "
          f"onedir {size / 1e6:.1f} MB, --version {onedir_s:.2f} s")


def test_onefile_runs_where_there_is_no_python(binary, root):
    """The portable file copied into a fresh Debian root that has no Python."""
    assert not (root / "usr/bin/python3").exists()
    shutil.copy(binary, root / "usr/local/bin/lavinmq")
    os.symlink("lavinmq", root / "usr/local/bin/lavinmqperf")
    out = in_root(root, "/usr/local/bin/lavinmq", "--version", user="nobody:nogroup").stdout
    assert out == f"lavinmq {version()}\n"
    assert "throughput" in in_root(root, "/usr/local/bin/lavinmqperf", "--help", user="nobody:nogroup").stdout


def test_broker_ctl_and_perf_from_one_binary(binary, tmp_path):
    port, http = free_port(), free_port()
    data = tmp_path / "data"
    env = clean_env(tmp_path)
    proc = subprocess.Popen([binary, "-D", str(data), "-p", str(port), "--http-port", str(http),
                             "--metrics-http-port", "0", "--amqps-port", "0", "--https-port", "0",
                             "--mqtt-port", "0", "--mqtts-port", "0"],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "frozen broker did not start"
                time.sleep(0.1)
        conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/%2F"))
        ch = conn.channel()
        ch.queue_declare("frozen", durable=True)
        ch.basic_publish("", "frozen", b"hi")
        conn.close()
        ctl = os.path.join(DIST, "lavinmqctl")
        out = subprocess.run([ctl, "--socket", str(data / "lavinmqctl.sock"), "-q", "list_queues"], env=env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and out.stdout == "frozen\t1\t1\t0\t0\n"
        perf = os.path.join(DIST, "lavinmqperf")
        out = subprocess.run([perf, "throughput", "--uri", f"amqp://guest:guest@127.0.0.1:{port}", "-z", "2",
                              "-j"], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and '"avg_pub_rate"' in out.stdout
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    log = proc.stdout.read().decode()
    assert "Traceback" not in log


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_unit_verifies_and_is_hardened(tmp_path):
    unit = open(os.path.join(ROOT, "packaging", "lavinmq.service")).read()
    # verify checks that ExecStart exists: point it at a binary that does
    path = tmp_path / "lavinmq.service"
    path.write_text(unit.replace("/usr/bin/lavinmq", "/bin/true"))
    out = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", str(path)], capture_output=True,
                         text=True, timeout=60)
    score = float(out.stdout.split("Overall exposure level for lavinmq.service:")[1].split()[0])
    print(f"\nsystemd-analyze security: {score}")
    assert score <= 2.0
