"""packaging/lavinmq.ini, the conffile the packages install, documents
every setting, and loads as it is and with every line uncommented."""
import os
import re

from lavinmq.config import OPTIONS, Config

INI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "packaging", "lavinmq.ini")


def test_every_option_is_documented():
    text = open(INI).read()
    section, found = None, set()
    for line in text.splitlines():
        if m := re.match(r"\[(\w+)\]", line):
            section = m.group(1)
        elif m := re.match(r";(\w+) =", line):
            found.add((section, m.group(1)))
    for field, opt in OPTIONS.items():
        assert opt.ini[0] in found or any(k in found for k in opt.ini), f"{field} not in {INI}"


def test_loads_commented_and_uncommented(tmp_path):
    env = {"LAVINMQ_CONFIGURATION_DIRECTORY": str(tmp_path)}
    assert Config.load(["-c", INI], env).warnings == []
    live = tmp_path / "live.ini"
    live.write_text(re.sub(r"^;(\w+ =)", r"\1", open(INI).read(), flags=re.M))
    c = Config.load(["-c", str(live)], env)
    assert c.warnings == [] and c.data_dir == "/var/lib/lavinmq" and c.sync is True and c.amqp_port == 5672


# after the drain: shovels and links stop (up to 5 s, lavinmq.client.run_loop),
# close-ok is waited for (1 s), a leader waits for its last replication round (1 s)
STOP_AFTER_DRAIN = 10


def test_the_service_outwaits_the_shutdown_drain():
    """systemd sends SIGKILL TimeoutStopSec after SIGTERM: the grace period
    for clients' acks (and what follows it) must end well before."""
    unit = open(os.path.join(os.path.dirname(INI), "lavinmq.service")).read()
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1))
    documented = float(re.search(r"^;shutdown_drain_timeout = (\S+)$", open(INI).read(), re.M).group(1))
    assert documented == Config().shutdown_drain_timeout
    assert Config().shutdown_drain_timeout + STOP_AFTER_DRAIN <= stop / 2
