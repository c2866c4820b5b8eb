"""A real etcd (Debian's etcd-server) on its own ports in a temporary
directory, for the clustering tests. --unsafe-no-fsync: nothing here
survives a power cut anyway, and fsyncs would only slow the tests down."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request


def etcd_binary():
    return shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class EtcdProcess:
    def __init__(self, data_dir, host="127.0.0.1"):
        self.data_dir = str(data_dir)
        self.host = host
        self.client_port = free_port(host)
        self.peer_port = free_port(host)
        self.proc = None
        self.log_path = self.data_dir + ".log"

    @property
    def endpoint(self):
        return f"{self.host}:{self.client_port}"

    @property
    def url(self):
        return f"http://{self.endpoint}"

    def start(self, timeout=20):
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [etcd_binary(), "--name", "test", "--data-dir", self.data_dir,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"test={peer}", "--unsafe-no-fsync",
             "--logger", "zap", "--log-level", "error"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=0.5) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"etcd did not start in {timeout} s: {self.log_tail()}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    def call(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def get(self, key):
        """The value of key as str, or None."""
        import base64
        r = self.call("/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = r.get("kvs") or []
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def get_prefix(self, prefix):
        import base64
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self.call("/v3/kv/range", {"key": base64.b64encode(prefix.encode()).decode(),
                                       "range_end": base64.b64encode(end.encode()).decode()})
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
                for kv in r.get("kvs") or []}
