"""Issue 13 item 12: a listener that cannot open stops the start with one
line naming the setting and the port, without a traceback; the same for a
control socket or a data directory another broker holds."""
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT, BrokerProcess, free_port


def start(data_dir, *args):
    return subprocess.run([sys.executable, "-m", "lavinmq", "-D", str(data_dir), *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def ports(**over):
    p = {"-p": free_port(), "--http-port": free_port(), "--metrics-http-port": 0, "--amqps-port": 0,
         "--https-port": 0, "--mqtt-port": free_port(), "--mqtts-port": free_port()}
    p.update(over)
    return [str(x) for kv in p.items() for x in kv]


@pytest.mark.parametrize("flag,text", [
    ("-p", "AMQP port {} (--amqp-port / [amqp] port) is in use"),
    ("--http-port", "HTTP port {} (--http-port / [mgmt] port) is in use"),
    ("--metrics-http-port", "metrics port {} (--metrics-http-port / [main] metrics_http_port) is in use"),
    ("--amqps-port", "AMQPS port {} (--amqps-port / [amqp] tls_port) is in use"),
    ("--https-port", "HTTPS port {} (--https-port / [mgmt] tls_port) is in use"),
    ("--mqtt-port", "MQTT port {} (--mqtt-port / [mqtt] port) is in use"),
    ("--mqtts-port", "MQTTS port {} (--mqtts-port / [mqtt] tls_port) is in use"),
])
def test_port_in_use_is_one_line(tmp_path, certs, flag, text):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = start(tmp_path / "d", *ports(**{flag: port}), "--cert", certs["cert"], "--key", certs["key"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == "lavinmq: error: " + text.format(port)
    assert "Traceback" not in r.stderr + r.stdout
    # nothing was left listening or locked: the same data dir starts now
    b = BrokerProcess(tmp_path / "d").start()
    assert b.stop() == 0


def test_control_socket_and_data_dir_held_by_another_broker(tmp_path):
    a = BrokerProcess(tmp_path / "a").start()
    try:
        r = start(tmp_path / "a", *ports())
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith(
            f"lavinmq: error: data directory {tmp_path / 'a'} (--data-dir / [main] data_dir) is locked")
        sock = str(tmp_path / "a" / "lavinmqctl.sock")
        ini = tmp_path / "b.ini"
        ini.write_text(f"[main]\ncontrol_unix_path = {sock}\n")
        r = start(tmp_path / "b", *ports(), "-c", str(ini))
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines()[-1] == \
            f"lavinmq: error: control socket {sock} (control_unix_path) is in use by another broker"
    finally:
        assert a.stop() == 0
    # a clean stop removes the control socket (issue 13 item 15)
    assert not (tmp_path / "a" / "lavinmqctl.sock").exists()


def test_every_busy_port_named_before_the_data_dir_is_touched(tmp_path):
    """Issue 31 item 2: all listeners are checked first; the error names each
    busy port with its flag, and no data directory, lock or user file is
    made."""
    with socket.socket() as a, socket.socket() as h:
        for s in (a, h):
            s.bind(("127.0.0.1", 0))
            s.listen()
        amqp, http = a.getsockname()[1], h.getsockname()[1]
        metrics = free_port()
        r = start(tmp_path / "new", *ports(**{"-p": amqp, "--http-port": http, "--metrics-http-port": metrics}))
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines()[-1] == (
            f"lavinmq: error: AMQP port {amqp} (--amqp-port / [amqp] port) is in use; "
            f"HTTP port {http} (--http-port / [mgmt] port) is in use")
        assert not (tmp_path / "new").exists()
        # an existing data directory is left as it was: no .lock, no users.json
        (tmp_path / "old").mkdir()
        r = start(tmp_path / "old", *ports(**{"-p": amqp}))
        assert r.returncode == 2
        assert f"AMQP port {amqp} (--amqp-port / [amqp] port) is in use" in r.stderr
        assert os.listdir(tmp_path / "old") == []
    # the port that was free was let go: the same ports start a broker now
    b = BrokerProcess(tmp_path / "new", port=amqp, extra_args=["--metrics-http-port", str(metrics)])
    b.http_port = http
    b.start()
    assert b.stop() == 0


def test_two_listeners_on_one_port(tmp_path):
    port = free_port()
    r = start(tmp_path / "d", *ports(**{"-p": port, "--http-port": port}))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        f"lavinmq: error: HTTP port {port} (--http-port / [mgmt] port) is the same as the AMQP port "
        f"(--amqp-port / [amqp] port)")
    assert not (tmp_path / "d").exists()
