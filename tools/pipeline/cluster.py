"""A Spark standalone cluster on this machine: one master and N workers on
127.0.0.1, started from the pyspark installation (its bin/spark-class), for
the tests and `make demo CLUSTER=1`; the step to a real cluster is in
docs/pipeline.md.

    with LocalCluster(workers=2) as c:
        spark = spark_session(c.url, ...)   # spark://127.0.0.1:PORT

Every process is stopped by its pid on exit, also when starting failed.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class ClusterError(RuntimeError):
    pass


def _free_port():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def spark_home():
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def terminate(p, timeout):
    """Ends process p: SIGTERM, then SIGKILL if it is still there after
    timeout seconds."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class LocalCluster:
    """Master and `workers` workers (`cores` and `memory` each) on
    127.0.0.1, logs and work directories under `workdir` (a temporary one,
    removed, by default)."""

    def __init__(self, workers=2, cores=1, memory="1g", workdir=None,
                 start_timeout=120.0, log=None):
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self._own = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="hf-spark-cluster-")
        os.makedirs(self.workdir, exist_ok=True)
        self.start_timeout = start_timeout
        self.log = log or (lambda m: print("cluster: " + m, file=sys.stderr, flush=True))
        self.procs = []           # (name, Popen, log path)
        self.port = None

    @property
    def url(self):
        return "spark://127.0.0.1:%d" % self.port

    def _spawn(self, name, args):
        home = spark_home()
        path = os.path.join(self.workdir, name + ".log")
        # The master's REST submission server (on by default since Spark
        # 4.1, port 6066, no authentication) runs any driver a local POST
        # asks for: off. Every port the daemons open is a free one.
        opts = "-Dspark.master.rest.enabled=false -Dspark.master.rest.port=%d" % _free_port()
        env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=self.workdir, SPARK_WORKER_DIR=os.path.join(self.workdir, name),
                   PYSPARK_PYTHON=sys.executable, SPARK_MASTER_OPTS=opts,
                   SPARK_WORKER_OPTS="-Dspark.shuffle.service.enabled=false")
        with open(path, "wb") as out:
            p = subprocess.Popen([os.path.join(home, "bin", "spark-class")] + args, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append((name, p, path))
        return path

    def _wait_log(self, name, path, proc, text):
        """Wait for a line in a daemon's log (its own word that it is up)."""
        end = time.monotonic() + self.start_timeout
        while time.monotonic() < end:
            with open(path, errors="replace") as f:
                if text in f.read():
                    return
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        with open(path, errors="replace") as f:
            tail = f.read()[-3000:]
        raise ClusterError("%s did not log %r (%s):\n%s" % (
            name, text, "exited %s" % proc.returncode if proc.poll() is not None
            else "timeout %.0f s" % self.start_timeout, tail))

    def start(self):
        try:
            self.port = _free_port()
            path = self._spawn("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.port), "--webui-port", str(_free_port())])
            self._wait_log("master", path, self.procs[-1][1], "I have been elected leader")
            for i in range(self.n_workers):
                name = "worker-%d" % (i + 1)
                path = self._spawn(name, [
                    "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                    "--port", str(_free_port()),
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--webui-port", str(_free_port()),
                    "--work-dir", os.path.join(self.workdir, name)])
                self._wait_log(name, path, self.procs[-1][1], "Successfully registered with master")
            self.log("master %s and %d worker(s) (%d core(s), %s each) up"
                     % (self.url, self.n_workers, self.cores, self.memory))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Workers first, then the master, each by its pid: SIGTERM, then
        SIGKILL after 20 s."""
        for name, p, _ in reversed(self.procs):
            terminate(p, 20)
        self.procs = []
        if self._own:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
