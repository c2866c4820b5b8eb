"""LavinMQ's `lavinmq` flags that apply here: --pidfile, --control-unix-path,
--default-consumer-prefetch, --build-info, and the deprecated and runtime
flags LavinMQ still accepts (--default-password, --guest-only-loopback,
--tls-ktls false), on a real broker; what is not here is refused."""
import subprocess
import sys
import time

import pika
import pytest

from lavinmq.auth.password import hash_password
from lavinmq.config import Config, ConfigError
from tests.conftest import ROOT, BrokerProcess, unique
from tests.parity.helpers import api


def test_build_info_and_version():
    out = subprocess.run([sys.executable, "-m", "lavinmq", "--build-info"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0
    first, python = out.stdout.splitlines()[:2]
    assert first.startswith("lavinmq ") and python.startswith("Python ")


def test_flags_on_a_real_broker(tmp_path):
    pidfile, sock = tmp_path / "run" / "lavinmq.pid", tmp_path / "ctl.sock"
    pidfile.parent.mkdir()
    b = BrokerProcess(tmp_path / "data", extra_args=[
        "--pidfile", str(pidfile), "--control-unix-path", str(sock), "--default-consumer-prefetch", "3",
        "--default-user", "admin", "--default-password", hash_password("s3cret"),
        "--guest-only-loopback", "true", "--tls-ktls", "false"])
    b.url = b.url.replace("guest:guest", "admin:s3cret")
    b.start()
    try:
        deadline = time.monotonic() + 5
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert int(pidfile.read_text()) == b.proc.pid
        # the deprecated --default-password is the hash, as LavinMQ reads it
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()                     # no basic.qos: the default prefetch applies
        q = ch.queue_declare(unique("q"), exclusive=True).method.queue
        for i in range(10):
            ch.basic_publish("", q, b"%d" % i)
        got = []
        ch.basic_consume(q, lambda c, m, p, body: got.append(m.delivery_tag))
        conn.process_data_events(0.5)
        assert len(got) == 3
        # the control socket answers the API
        ctl = subprocess.run([sys.executable, "-m", "lavinmq.ctl", "--socket", str(sock), "-u", "admin",
                              "--password", "s3cret", "-f", "json", "list_queues"],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert ctl.returncode == 0, ctl.stderr
        assert q in ctl.stdout
        conn.close()
        log = b.log_text()
        for flag in ("--default-password is deprecated", "--guest-only-loopback is deprecated"):
            assert flag in log, flag
    finally:
        assert b.stop() == 0
    assert not pidfile.exists()


def test_environment_of_the_new_settings(tmp_path):
    env = {"LAVINMQ_CONTROL_UNIX_PATH": str(tmp_path / "c.sock"), "LAVINMQ_DEFAULT_CONSUMER_PREFETCH": "7",
           "LAVINMQ_CONFIGURATION_DIRECTORY": str(tmp_path)}
    c = Config.load([], env)
    assert c.control_unix_path == str(tmp_path / "c.sock") and c.default_consumer_prefetch == 7


def test_ini_default_password_holding_a_hash_is_the_hash(tmp_path):
    """LavinMQ's [main] default_password is a hash (deprecated there); a
    plain password there keeps working as before."""
    ini = tmp_path / "lavinmq.ini"
    h = hash_password("s3cret")
    ini.write_text(f"[main]\ndefault_password = {h}\n")
    c = Config.load(["-c", str(ini)], {})
    assert c.default_password_hash == h and any("default_password_hash" in w for w in c.warnings)
    ini.write_text("[main]\ndefault_password = plain words\n")
    c = Config.load(["-c", str(ini)], {})
    assert c.default_password == "plain words" and c.default_password_hash is None


def test_flags_for_what_is_not_here_are_refused(tmp_path):
    """Kernel TLS offload and Crystal's GC warnings are not here: asking for
    them stops the start naming the flag; --tls-ktls false asks for nothing."""
    env = {"LAVINMQ_CONFIGURATION_DIRECTORY": str(tmp_path)}
    for argv, flag in ((["--tls-ktls", "true"], "--tls-ktls"), (["--raise-gc-warn"], "--raise-gc-warn")):
        with pytest.raises(ConfigError, match=flag):
            Config.load(argv, env)
    assert Config.load(["--tls-ktls", "false"], env).warnings == []
