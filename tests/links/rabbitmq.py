"""RabbitMQ 3.10 (Debian's rabbitmq-server, with its shovel and federation
plugins) as a peer: a node of its own on free ports, with its own node
name, Erlang cookie (HOME), data and log directories, started straight from
/usr/lib/rabbitmq/bin (Debian's /usr/sbin wrapper would switch to the
rabbitmq user and its fixed directories). A start takes ~3-5 s: tests start
it once per session (tests/links/conftest.py)."""
import os
import shutil
import signal
import socket
import subprocess
import time

from tests.conftest import free_port

BIN = "/usr/lib/rabbitmq/bin"
PLUGINS = ("rabbitmq_shovel", "rabbitmq_federation")


def missing():
    if not os.access(os.path.join(BIN, "rabbitmq-server"), os.X_OK):
        return "rabbitmq-server is not installed (apt-get install rabbitmq-server; ./dev test does)"
    return None


class RabbitMQ:
    def __init__(self, base_dir, plugins=PLUGINS):
        self.dir = str(base_dir)
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.dist_port = free_port()
        self.host = "127.0.0.1"
        self.node = f"lavinmq-test-{self.port}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.log_path = os.path.join(self.dir, "server.log")
        with open(os.path.join(self.dir, "rabbitmq.conf"), "w") as f:
            f.write(f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n"
                    f"log.console = false\n")
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write("[" + ",".join(plugins) + "].\n")
        self.env = dict(os.environ, HOME=self.dir, RABBITMQ_NODENAME=self.node,
                        RABBITMQ_DIST_PORT=str(self.dist_port),
                        RABBITMQ_CONFIG_FILE=os.path.join(self.dir, "rabbitmq.conf"),
                        RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(self.dir, "enabled_plugins"),
                        RABBITMQ_MNESIA_BASE=os.path.join(self.dir, "mnesia"),
                        RABBITMQ_LOG_BASE=os.path.join(self.dir, "log"),
                        RABBITMQ_PID_FILE=os.path.join(self.dir, "pid"))
        self.proc = None

    def start(self, timeout=60):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([os.path.join(BIN, "rabbitmq-server")], env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"rabbitmq-server did not start in {timeout}s:\n{self.log_tail()}")

    def ctl(self, *args, check=True):
        """rabbitmqctl against this node -> its output."""
        out = subprocess.run([os.path.join(BIN, "rabbitmqctl"), "-n", self.node, *args], env=self.env,
                             capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {out.stderr or out.stdout}")
        return out.stdout

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        # the process group: the Erlang VM, and epmd if this node started it
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def log_tail(self, lines=30):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)
