"""A real Spark standalone cluster on loopback, started from pyspark's own `spark-class`: one master and N
workers, each a JVM of its own, stopped (with everything they started) by `stop()`. Used by the tests and
by bench/bench_engines.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

# What every application on the test cluster is given: no UI, loopback only, half the worker.
APP_CONF = [
    ("spark.ui.enabled", "false"),
    ("spark.driver.host", "127.0.0.1"),
    ("spark.driver.bindAddress", "127.0.0.1"),
    ("spark.cores.max", "2"),
    ("spark.executor.memory", "512m"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    def __init__(self, workers: int = 1, cores: int = 2, memory: str = "1g") -> None:
        import pyspark

        self.home = str(Path(pyspark.__file__).resolve().parent)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.workdir = tempfile.mkdtemp(prefix="ksniff-standalone-")
        self.procs: list[subprocess.Popen] = []

    def _start(self, name: str, *args: str) -> None:
        env = dict(
            os.environ,
            SPARK_HOME=self.home,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_WORKER_DIR=os.path.join(self.workdir, "work"),
            SPARK_LOG_DIR=os.path.join(self.workdir, "logs"),
        )
        log = open(os.path.join(self.workdir, f"{name}.log"), "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(
            subprocess.Popen(
                [os.path.join(self.home, "bin", "spark-class"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui),
        )
        for n in range(self.workers):
            self._start(
                f"worker{n}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                os.path.join(self.workdir, f"work{n}"),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_workers() == self.workers:
                return self
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        logs = {p.name: p.read_text(errors="replace")[-2000:] for p in Path(self.workdir).glob("*.log")}
        self.stop()
        raise RuntimeError(f"the standalone cluster did not come up: {logs}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as answer:
                state = json.load(answer)
        except (OSError, ValueError):  # not up yet; or, once, an HTML page (another web UI on the port)
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False
