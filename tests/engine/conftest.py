"""One real Spark standalone cluster (master + worker from pyspark's spark-class, on loopback) and one
SparkSession on it, shared by the Spark tests of a module and stopped at its end (a session left running
would be the one later in-process runs of the Spark engine get)."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

SPARK_READY = importlib.util.find_spec("pyspark") is not None and shutil.which("java") is not None


@pytest.fixture(scope="module")
def standalone():
    if not SPARK_READY:
        pytest.skip("pyspark or Java is not installed")
    from spark_cluster import StandaloneCluster

    # Four cores (of two real ones) and 2 GB: room for the shared session and one more application at a
    # time (the command-line test's), each capped at two cores and 512 MB below.
    with StandaloneCluster(workers=1, cores=4, memory="2g") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark(standalone):
    from spark_cluster import APP_CONF

    from ksniff.engine.spark_session import Session

    conf = [*APP_CONF, ("spark.pyspark.python", sys.executable)]
    session = Session(standalone.url, conf=conf)
    yield session.start()
    session.stop()
