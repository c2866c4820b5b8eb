"""The `lavinmq` command: flags, exit codes, logging, data directory and its
lock. launcher.run is replaced by a recorder; everything else is real."""
import logging
import os
import re
import subprocess
import sys

import pytest

import lavinmq
import lavinmq.launcher
from lavinmq import cli
from lavinmq.datadir import DataDirLock
from lavinmq.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\w+) ([\w.]+): (.*)$")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No /etc/lavinmq/lavinmq.ini or LAVINMQ_* from the machine; root logger
    restored after main() replaced its handlers."""
    etc = tmp_path / "etc"
    etc.mkdir()
    for var in list(os.environ):
        if var.startswith("LAVINMQ_") or var in ("STATE_DIRECTORY", "CONFIGURATION_DIRECTORY"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("LAVINMQ_CONFIGURATION_DIRECTORY", str(etc))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for h in root.handlers[:]:
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    for h in handlers:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(level)


@pytest.fixture
def runs(monkeypatch):
    """Replaces launcher.run; records each config and what it saw. The
    ports are not bound (the defaults may be another broker's here):
    tests/security/test_ports_in_use.py starts real processes for that."""
    calls = []
    monkeypatch.setattr(cli, "hold_ports", lambda config: False)

    def run(config):
        locked_out = None
        try:
            DataDirLock(config.data_dir).acquire().release()
        except ConfigError as exc:
            locked_out = str(exc)
        logging.getLogger("lavinmq.server").info("hello from %s", "run")
        logging.getLogger("lavinmq.server").debug("debug detail")
        calls.append({"config": config, "locked_out": locked_out})
        return 7

    monkeypatch.setattr(lavinmq.launcher, "run", run)
    return calls


def env_for_subprocess():
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAVINMQ_")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"lavinmq {lavinmq.__version__}"
    assert cli.main(["-v"]) == 0
    assert capsys.readouterr().out.strip() == f"lavinmq {lavinmq.__version__}"


def test_version_as_a_program():
    r = subprocess.run([sys.executable, "-m", "lavinmq", "--version"], capture_output=True, text=True,
                       cwd=ROOT, env=env_for_subprocess(), timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, f"lavinmq {lavinmq.__version__}")


def test_help(capsys):
    assert cli.main(["-h"]) == 0
    out = capsys.readouterr().out
    for flag in ("--data-dir", "--config", "--bind", "--amqp-port", "--amqp-bind", "--http-port",
                 "--http-bind", "--log-level", "--version", "--no-data-dir-lock", "--debug"):
        assert flag in out


def test_unknown_flag_is_exit_2(capsys, runs):
    assert cli.main(["--frobnicate"]) == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err
    assert runs == []


def test_bad_value_is_exit_2_naming_the_key(tmp_path, capsys, runs):
    path = tmp_path / "bad.ini"
    path.write_text("[amqp]\nport = abc\n")
    assert cli.main(["-c", str(path), "-D", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == f"lavinmq: error: {path}: [amqp] port: 'abc' is not an integer\n"
    assert cli.main(["-p", "99999", "-D", str(tmp_path / "d")]) == 2
    assert "lavinmq: error: --amqp-port: 99999 is out of range" in capsys.readouterr().err
    assert runs == []


def test_runs_server_with_config_holding_the_lock(tmp_path, runs, capsys):
    data = tmp_path / "a" / "b"
    assert cli.main(["-D", str(data), "-p", "0", "--http-port", "0", "-b", "127.0.0.2"]) == 7
    (call,) = runs
    config = call["config"]
    assert (config.data_dir, config.amqp_port, config.amqp_bind, config.http_bind) == (str(data), 0, "127.0.0.2", "127.0.0.2")
    # created with 0750 (less whatever the umask removes)
    umask = os.umask(0)
    os.umask(umask)
    assert data.is_dir() and (data.stat().st_mode & 0o777) == (0o750 & ~umask)
    # the lock was held while the server ran, and released afterwards
    assert "is locked by another lavinmq process" in call["locked_out"]
    assert f"(pid {os.getpid()})" in call["locked_out"]
    DataDirLock(str(data)).acquire().release()
    # default log target is stderr, in the agreed format, at info
    lines = [LINE.match(line) for line in capsys.readouterr().err.splitlines()]
    assert [m.groups() for m in lines if m] == [("INFO", "lavinmq.server", "hello from run")]


def test_no_data_dir_lock(tmp_path, runs):
    assert cli.main(["-D", str(tmp_path), "--no-data-dir-lock"]) == 7
    assert runs[0]["locked_out"] is None


def test_log_file_and_debug_level(tmp_path, runs):
    log_file = tmp_path / "lavinmq.log"
    ini = tmp_path / "l.ini"
    ini.write_text(f"[main]\nlog_file = {log_file}\n[clustering]\nmax_unsynced_actions = 8192\n")
    assert cli.main(["-c", str(ini), "-D", str(tmp_path / "d"), "--debug"]) == 7
    logging.shutdown()
    lines = [LINE.match(line).groups() for line in log_file.read_text().splitlines()]
    assert ("WARNING", "lavinmq.cli", f"{ini}: [clustering] max_unsynced_actions is deprecated and has no effect: "
                                      f"confirms wait for every in-sync replica") in lines
    assert ("INFO", "lavinmq.server", "hello from run") in lines
    assert ("DEBUG", "lavinmq.server", "debug detail") in lines


def test_log_file_that_cannot_be_opened(tmp_path, runs, capsys, monkeypatch):
    bad = tmp_path / "no" / "such" / "dir" / "x.log"
    monkeypatch.setenv("LAVINMQ_LOG_FILE", str(bad))
    assert cli.main(["-D", str(tmp_path)]) == 2
    assert f"lavinmq: error: cannot open log file {bad}" in capsys.readouterr().err


def test_data_dir_that_cannot_be_created(tmp_path, runs, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["-D", str(blocker / "data")]) == 2
    assert f"lavinmq: error: cannot create data directory {blocker / 'data'}" in capsys.readouterr().err
    assert cli.main(["-D", str(blocker)]) == 2
    assert f"data directory {blocker} is not a directory" in capsys.readouterr().err
    assert runs == []


@pytest.fixture
def locked_by_other_process(tmp_path):
    """A second process that holds the data directory's lock until we close its stdin."""
    code = ("import sys; from lavinmq.datadir import DataDirLock; "
            "DataDirLock(sys.argv[1]).acquire(); print('locked', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env_for_subprocess())
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()


def test_lock_held_by_another_process(tmp_path, locked_by_other_process, runs, capsys):
    pid = locked_by_other_process.pid
    assert (tmp_path / ".lock").read_text().strip() == str(pid)
    assert cli.main(["-D", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"lavinmq: error: data directory {tmp_path} (--data-dir / [main] data_dir) is locked by another "
        f"lavinmq process (pid {pid})\n")
    assert runs == []
    with pytest.raises(ConfigError, match=f"pid {pid}"):
        with DataDirLock(str(tmp_path)):
            pass
    # the flag skips the lock on purpose
    assert cli.main(["-D", str(tmp_path), "--no-data-dir-lock"]) == 7


def test_lock_is_free_once_the_holder_exits(tmp_path, locked_by_other_process):
    locked_by_other_process.stdin.close()
    locked_by_other_process.wait(30)
    with DataDirLock(str(tmp_path)) as lock:
        assert lock.locked
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
    assert not lock.locked
    assert (tmp_path / ".lock").read_text() == ""   # no stale pid after release


def test_lock_within_one_process(tmp_path):
    # flock belongs to the open file, so a second open in the same process is refused too
    with DataDirLock(str(tmp_path)):
        with pytest.raises(ConfigError, match="locked by another lavinmq process"):
            DataDirLock(str(tmp_path)).acquire()
