"""A Spark standalone cluster on this machine, started from the pyspark
package's own classes: a master and workers (bin/spark-class
org.apache.spark.deploy.master.Master / ...worker.Worker) and a Spark Connect
server (bin/spark-submit --class ...connect.service.SparkConnectServer, what
sbin/start-connect-server.sh runs, in the foreground), all on loopback with
ports of their own and small heaps. The connector's tests, the example
pipeline (--cluster) and benchmarks/spark_read.py run on it.

    cluster = StandaloneCluster(workers=2).start()
    spark = session(cluster.master_url, conf=cluster.app_conf())
    ...
    cluster.stop()

Each worker offers `cores` cores and an application takes one executor of one
core on each worker (spark.cores.max = workers, spread out), so two
applications (a classic session and a Connect server) fit side by side.
Executors import the lavinmq the driver imports (spark.executorEnv.PYTHONPATH):
a worker needs lavinmq installed, not running."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

# the smallest heap Spark lets an executor have is 450 MiB (1.5 x its 300 MiB
# reserve); master and worker daemons do with far less
EXECUTOR_MEMORY = "512m"
DAEMON_MEMORY = "160m"
# JVMs that start quickly and stay small on a machine of few cores: the
# serial collector and the C1 compiler only (for tests; a benchmark wants the
# full JIT)
SMALL_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def spark_home():
    from pyspark.find_spark_home import _find_spark_home
    return _find_spark_home()


_given = set()


def free_port():
    """A free port, never one handed out before by this process: the kernel
    offers a just-released port again, and a Spark daemon whose port is
    taken moves to the next one quietly."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given:
            _given.add(port)
            return port


def connector_path():
    """The directory the driver's lavinmq package is imported from."""
    import lavinmq
    return os.path.dirname(os.path.dirname(os.path.abspath(lavinmq.__file__)))


def base_env(small=True):
    env = dict(os.environ)
    env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
               # a port that is taken is an error, not a move to the next one
               # (the URLs here name the ports given)
               SPARK_DAEMON_JAVA_OPTS="-Dspark.port.maxRetries=0" + (" " + SMALL_JVM if small else ""))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return env


def children(pid):
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def descendants(pid):
    out, todo = [], children(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children(p))
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Daemon:
    """One JVM of the cluster (spark-class execs java: the pid is the JVM's),
    its output in a log file."""

    def __init__(self, name, argv, env, log_path, cwd=None):
        self.name, self.argv, self.env, self.log_path, self.cwd = name, argv, env, log_path, cwd
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        # a session of its own: stop() takes whatever it started along
        # (a worker's executors, their Python daemons) with it
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.cwd, start_new_session=True)
        log.close()
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL):
        """Only the JVM (what a crash of it looks like to the rest)."""
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait()

    def stop(self, timeout=20):
        if self.proc is None:
            return
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:            # anything of its session left behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, lines=30):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


class StandaloneCluster:
    def __init__(self, workers=2, cores=2, worker_memory=None, base_dir=None, worker_timeout=60, small=True):
        self.n_workers = workers
        self.small = small
        self.cores = cores
        # room for one executor per application it runs at once
        self.worker_memory = worker_memory or f"{cores * 512 + 64}m"
        self.own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="lavinmq-spark-cluster-")
        os.makedirs(self.base_dir, exist_ok=True)
        self.worker_timeout = worker_timeout
        self.port = free_port()
        self.ui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master = None
        self.workers = []

    # -- processes -------------------------------------------------------------------

    def _spark_class(self, cls, *args):
        return [os.path.join(spark_home(), "bin", "spark-class"), cls, *args]

    def _master(self):
        env = base_env(self.small)
        # a worker that stops heart-beating is given up after worker_timeout s
        # (a dead worker's executors are noticed at once through their driver)
        env["SPARK_MASTER_OPTS"] = (f"-Dspark.worker.timeout={self.worker_timeout} "
                                    f"-Dspark.master.rest.enabled=false")
        return Daemon("master", self._spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                                  "--port", str(self.port), "--webui-port", str(self.ui_port)),
                      env, os.path.join(self.base_dir, "master.log"))

    def _worker(self, i):
        work = os.path.join(self.base_dir, f"worker-{i}")
        os.makedirs(work, exist_ok=True)
        return Daemon(f"worker-{i}", self._spark_class(
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(free_port()),
            "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.worker_memory,
            "--work-dir", work, self.master_url), base_env(self.small),
            os.path.join(self.base_dir, f"worker-{i}.log"))

    def start(self, timeout=240):
        self.master = self._master().start()
        self.workers = [self._worker(i).start() for i in range(self.n_workers)]
        try:
            self.wait_workers(self.n_workers, timeout)
        except Exception:
            self.stop()
            raise
        return self

    def state(self):
        """The master's view (its web UI's /json)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def alive_workers(self):
        try:
            return [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
        except OSError:
            return []

    def wait_workers(self, n, timeout=240):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for d in [self.master, *self.workers]:
                if d.proc.poll() is not None and d in self.workers[:n] + [self.master]:
                    raise RuntimeError(f"Spark {d.name} exited with {d.proc.returncode}:\n{d.log_tail()}")
            if len(self.alive_workers()) >= n:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{n} Spark workers did not register in {timeout} s:\n{self.master.log_tail()}")

    def worker_dir(self, i):
        return os.path.join(self.base_dir, f"worker-{i}")

    def executors(self, i):
        """Pids of the executor JVMs worker i runs."""
        if not self.workers[i].alive():
            return []
        return [p for p in children(self.workers[i].pid) if "CoarseGrainedExecutorBackend" in cmdline(p)]

    def python_workers(self, i):
        """Pids of the Python workers of worker i's executors (forked by
        each executor's pyspark.daemon, which is left out)."""
        out = []
        for ex in self.executors(i):
            for daemon in children(ex):
                if "pyspark.daemon" in cmdline(daemon):
                    out.extend(children(daemon))
        return out

    def processes_in(self, i):
        """Pids of every process working in worker i's directory (its
        executors and their Python processes), whoever their parent is now."""
        root = os.path.realpath(self.worker_dir(i)) + os.sep
        out = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.path.realpath(os.readlink(f"/proc/{name}/cwd")).startswith(root):
                        out.append(int(name))
                except OSError:
                    pass
        return out

    def pids(self):
        """Every process of the cluster: master, workers, executors and
        their Python processes (for CPU accounting)."""
        roots = [d.pid for d in [self.master, *self.workers] if d is not None and d.alive()]
        return roots + [p for r in roots for p in descendants(r)]

    def kill_worker(self, i):
        """SIGKILL the Worker JVM i (its executors notice and exit)."""
        self.workers[i].kill()

    def restart_worker(self, i, timeout=240):
        self.workers[i].stop()
        self.workers[i] = self._worker(i).start()
        self.wait_workers(self.n_workers, timeout)

    def stop(self):
        for d in self.workers + [self.master]:
            if d is not None:
                d.stop()
        if self.own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- applications ----------------------------------------------------------------

    def app_conf(self, executors=None):
        """Settings for an application on this cluster: one small executor
        with one core on each worker."""
        n = executors or self.n_workers
        return {
            **({"spark.executor.extraJavaOptions": SMALL_JVM} if self.small else {}),
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": "1",
            "spark.cores.max": str(n),
            "spark.executorEnv.PYTHONPATH": connector_path(),
        }

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class ConnectServer:
    """A Spark Connect server (an application of `master`), for clients of
    SparkSession.builder.remote(server.url)."""

    def __init__(self, master="local[2]", conf=None, base_dir=None, port=None):
        self.master = master
        self.port = port or free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.conf = dict(conf or {})
        self.own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="lavinmq-spark-connect-")
        os.makedirs(self.base_dir, exist_ok=True)
        self.daemon = None

    def start(self, timeout=240):
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
            # its driver plans Python data sources in Python workers of its own
            "spark.executorEnv.PYTHONPATH": connector_path(),
            **self.conf,
        }
        argv = [os.path.join(spark_home(), "bin", "spark-submit"), "--class", CONNECT_CLASS,
                "--name", "lavinmq Spark Connect", "--master", self.master, "--driver-memory", "512m"]
        for k, v in conf.items():
            argv += ["--conf", f"{k}={v}"]
        env = base_env(small=False)
        # the launcher sizes the Connect server's driver as a daemon's
        env["SPARK_DAEMON_MEMORY"] = "512m"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [connector_path(), env.get("PYTHONPATH")]))
        self.daemon = Daemon("connect", argv, env, os.path.join(self.base_dir, "connect.log")).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.daemon.alive():
                raise RuntimeError(f"the Spark Connect server exited:\n{self.daemon.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the Spark Connect server did not listen in {timeout} s")

    def stop(self):
        if self.daemon is not None:
            self.daemon.stop()
        if self.own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)


def session(master="local[2]", app="lavinmq", conf=None):
    """A classic SparkSession with the connector registered. conf's
    spark.driver.extraJavaOptions are added to the -Xss4m that deep plans of
    streaming queries need."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    conf = dict(conf or {})
    java = " ".join(filter(None, ["-Xss4m", conf.pop("spark.driver.extraJavaOptions", "")]))
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.extraJavaOptions", java))
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from lavinmq.spark import register
    register(spark)
    return spark


def executor_ids(spark):
    """Ids of the executors registered with a classic session's driver."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()        # a Scala Seq
    return sorted(str(ids.apply(i)) for i in range(ids.size()))


def wait_executors(spark, n, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = executor_ids(spark)
        if len(ids) >= n:
            return ids
        time.sleep(0.5)
    raise TimeoutError(f"{n} executors did not register in {timeout} s (have {executor_ids(spark)})")
