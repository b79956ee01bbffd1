"""Captures in an S3 bucket, read by the Spark engine's tasks themselves (ksniff.engine.objectstore).

The bucket is a real S3 endpoint on loopback (moto's server, started and stopped here); the Spark
application is the standalone cluster of conftest.py, whose JVM has no S3 file system at all (no
hadoop-aws jars): the driver lists the bucket and each task copies what it reads to its own disk.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ksniff.capture import CaptureError
from ksniff.engine import objectstore
from ksniff.engine.local import audit_paths

moto_server = pytest.importorskip("moto.server")

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
pytestmark = [pytest.mark.spark]
BUCKET = "captures"


@pytest.fixture(scope="module")
def bucket():
    """S3 settings of a bucket on an S3 server on loopback, and pyarrow's file system on it."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        settings = objectstore.S3Settings.of(
            {
                "spark.hadoop.fs.s3a.endpoint": f"http://{host}:{port}",
                "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
                "spark.hadoop.fs.s3a.access.key": "ksniff-test",
                "spark.hadoop.fs.s3a.secret.key": "not-a-secret",
                "spark.hadoop.fs.s3a.path.style.access": "true",  # as for MinIO: no bucket host names here
            }.get
        )
        from pyarrow import fs

        s3 = fs.S3FileSystem(
            access_key="ksniff-test",
            secret_key="not-a-secret",
            endpoint_override=f"{host}:{port}",
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        )
        s3.create_dir(BUCKET)
        yield settings, s3
    finally:
        server.stop()


@pytest.fixture
def s3_spark(spark, bucket):
    """The module's Spark session with the bucket's fs.s3a settings, as `--conf` would give them."""
    settings, _s3 = bucket
    keys = {
        "spark.hadoop.fs.s3a.endpoint": settings.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": settings.region,
        "spark.hadoop.fs.s3a.access.key": settings.access_key,
        "spark.hadoop.fs.s3a.secret.key": settings.secret_key,
        "spark.hadoop.fs.s3a.path.style.access": "true",
    }
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key in keys:
            spark.conf.unset(key)


def upload(s3, folder: Path, prefix: str) -> str:
    """Every file of `folder` under `prefix` in the bucket; the folder's s3a:// URI."""
    for path in sorted(folder.iterdir()):
        with s3.open_output_stream(f"{BUCKET}/{prefix}/{path.name}") as out:
            out.write(path.read_bytes())
    return f"s3a://{BUCKET}/{prefix}"


@pytest.mark.parametrize("shuffled", [False, True], ids=["where-read", "shuffled"])
def test_captures_in_a_bucket_give_the_local_result(
    s3_spark, bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shuffled: bool
) -> None:
    """A folder in a bucket (three brokers' captures of one cluster, another cluster's capture, a file
    that is not a capture) is planned, put on one time line and audited as the local engine does the same
    folder on disk: the same capture sets and clock offsets, transactions, findings, table rows and
    warning, whether each set is audited where it is read or goes the shuffled way. Spark's JVM here has
    no S3 file system: the run lists and reads the bucket without it."""
    from test_clock import per_broker, sets_seen

    from ksniff.config import EngineConfig
    from ksniff.engine import spark as spark_engine
    from ksniff.engine.spark import audit_paths_spark

    settings, s3 = bucket
    folder = tmp_path / "caps"
    folder.mkdir()
    per_broker(PCAPS / "txn_confluent_mock.pcap", folder, [0.0, 2.5, -1.7])
    shutil.copy(PCAPS / "misuse_tansu.pcap", folder / "other_cluster.pcap")
    (folder / "notes.txt").write_text("not a capture\n")
    uri = upload(s3, folder, f"parity-{shuffled}")
    # Left out of a folder's listing, as Spark's own listing leaves them (not captures: they would warn).
    for hidden in ("_SUCCESS", ".partial/x.pcap", "_tmp/y.pcap"):
        with s3.open_output_stream(f"{uri.removeprefix('s3a://')}/{hidden}") as out:
            out.write(b"not a capture")
    monkeypatch.setattr(spark_engine, "EVERY_SET_SHUFFLED", shuffled)
    config = EngineConfig(keep_tables=True)

    local = audit_paths([str(folder)], config)
    remote = audit_paths_spark([uri], config, spark=s3_spark)

    assert len(local.capture_sets) == 2 and local.transactions and local.findings
    assert sets_seen(remote, uri + "/") == sets_seen(local, str(folder) + "/")
    assert [i.path.removeprefix(uri) for i in remote.inputs] == [
        i.path.removeprefix(str(folder)) for i in local.inputs
    ]
    assert [t.as_contract() for t in remote.transactions] == [t.as_contract() for t in local.transactions]
    assert [f.as_contract() for f in remote.findings] == [f.as_contract() for f in local.findings]
    assert remote.exchanges == local.exchanges
    assert remote.batches == local.batches
    assert [w.replace(uri, "F") for w in remote.warnings if "not a capture" in w] == [
        w.replace(str(folder), "F") for w in local.warnings if "not a capture" in w
    ]


def test_a_missing_object_is_one_line_and_exit_two(s3_spark, bucket) -> None:
    from ksniff.engine.spark import audit_paths_spark

    with pytest.raises(CaptureError, match=rf"^s3a://{BUCKET}/nowhere/x\.pcap: no such file or folder$"):
        audit_paths_spark([f"s3a://{BUCKET}/nowhere/x.pcap"], spark=s3_spark)


@pytest.mark.parametrize(
    ("names", "shuffled"),
    [(("a.pcap", "b.pcap"), False), (("b.pcap",), False), (("b.pcap",), True)],
    ids=["planned", "audited-where-read", "shuffled"],
)
def test_an_object_gone_before_its_task_reads_it_stops_the_run_in_one_line(
    s3_spark, bucket, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...], shuffled: bool
) -> None:
    """An object listed, then deleted before a task copies it (a retention job, a rotation): the run stops
    with that object's one-line error, at once (a row of the task, not a failed task Spark retries),
    whichever task meets it first: the planner's (several files), or the audit's, where the set is read
    or the shuffled way."""
    from ksniff.engine import spark as spark_engine
    from ksniff.engine.spark import audit_paths_spark

    _settings, s3 = bucket
    prefix = f"gone-{len(names)}-{shuffled}"
    for name in names:
        with s3.open_output_stream(f"{BUCKET}/{prefix}/{name}") as out:
            out.write((PCAPS / "txn_confluent_tansu.pcap").read_bytes())
    listed = objectstore.S3Settings.listed

    def then_deleted(self, uri):
        found = listed(self, uri)
        s3.delete_file(f"{BUCKET}/{prefix}/b.pcap")
        return found

    monkeypatch.setattr(objectstore.S3Settings, "listed", then_deleted)
    monkeypatch.setattr(spark_engine, "EVERY_SET_SHUFFLED", shuffled)
    with pytest.raises(CaptureError) as raised:
        audit_paths_spark([f"s3a://{BUCKET}/{prefix}"], spark=s3_spark)
    assert str(raised.value) == f"s3a://{BUCKET}/{prefix}/b.pcap: cannot read: no such object"


def test_keys_any_text_may_name_are_read_as_named(s3_spark, bucket) -> None:
    """Object names are whatever the uploader chose: a space, ?, #, % and non-ASCII letters in a key are
    listed as a URI's path (percent-encoded, as Hadoop lists such names), shown as named, and read back
    as that object."""
    from ksniff.engine.spark import audit_paths_spark

    _settings, s3 = bucket
    named = {"odd name #1?.pcap": "txn_confluent_tansu.pcap", "100% ünïcode.pcap": "hanging_tansu.pcap"}
    for name, capture in named.items():
        with s3.open_output_stream(f"{BUCKET}/odd/{name}") as out:
            out.write((PCAPS / capture).read_bytes())
    result = audit_paths_spark([f"s3a://{BUCKET}/odd/"], spark=s3_spark)
    local = audit_paths([str(PCAPS / c) for c in named.values()])
    assert sorted(i.path for i in result.inputs) == sorted(f"s3a://{BUCKET}/odd/{n}" for n in named)
    assert sorted(i.packets for i in result.inputs) == sorted(i.packets for i in local.inputs)
    assert sorted(t.outcome for t in result.transactions) == sorted(t.outcome for t in local.transactions)
    assert len(result.transactions) == len(local.transactions) > 0


def test_the_same_keys_in_two_buckets_are_two_inputs(s3_spark, bucket) -> None:
    """Two buckets holding the same folder of keys: each argument's files are its own bucket's."""
    from ksniff.engine.spark import audit_paths_spark

    _settings, s3 = bucket
    s3.create_dir("other-captures")
    for name, capture in ((BUCKET, "txn_confluent_tansu.pcap"), ("other-captures", "hanging_tansu.pcap")):
        with s3.open_output_stream(f"{name}/same/a.pcap") as out:
            out.write((PCAPS / capture).read_bytes())
    uris = [f"s3a://{BUCKET}/same", "s3a://other-captures/same"]
    result = audit_paths_spark(uris, spark=s3_spark)
    assert [i.path for i in result.inputs] == [f"{u}/a.pcap" for u in uris]
    local = audit_paths([str(PCAPS / "txn_confluent_tansu.pcap"), str(PCAPS / "hanging_tansu.pcap")])
    assert [i.packets for i in result.inputs] == [i.packets for i in local.inputs]


def test_an_object_is_copied_a_chunk_at_a_time(
    bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's copy holds one chunk at a time, and the copy is the object, byte for byte."""
    settings, s3 = bucket
    data = (PCAPS / "txn_confluent_tansu.pcap").read_bytes()
    with s3.open_output_stream(f"{BUCKET}/chunks/c.pcap") as out:
        out.write(data)
    monkeypatch.setattr(objectstore, "CHUNK_BYTES", 1000)
    writes = []

    class Out:
        def write(self, chunk) -> None:
            writes.append(bytes(chunk))

    assert settings.copy(f"s3a://{BUCKET}/chunks/c.pcap", Out()) == len(data)
    assert b"".join(writes) == data
    assert max(len(w) for w in writes) == 1000 and len(writes) == -(-len(data) // 1000)


def test_s3a_settings_in_the_hadoop_configuration_are_read_too(spark, bucket) -> None:
    """S3A settings a cluster keeps in its Hadoop configuration (core-site.xml) rather than in Spark
    properties reach the tasks too; a Spark property, when both say, wins."""
    from ksniff.engine.spark import audit_paths_spark

    settings, s3 = bucket
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    keys = {
        "fs.s3a.endpoint": settings.endpoint,
        "fs.s3a.endpoint.region": settings.region,
        "fs.s3a.access.key": settings.access_key,
        "fs.s3a.secret.key": settings.secret_key,
        "fs.s3a.path.style.access": "true",
    }
    with s3.open_output_stream(f"{BUCKET}/hadoop/a.pcap") as out:
        out.write((PCAPS / "txn_confluent_tansu.pcap").read_bytes())
    for key, value in keys.items():
        hadoop.set(key, value)
    try:
        assert objectstore.settings_of(spark) == settings
        spark.conf.set("spark.hadoop.fs.s3a.endpoint.region", "eu-north-1")
        assert objectstore.settings_of(spark).region == "eu-north-1"
        spark.conf.unset("spark.hadoop.fs.s3a.endpoint.region")
        result = audit_paths_spark([f"s3a://{BUCKET}/hadoop/a.pcap"], spark=spark)
        assert result.transactions
    finally:
        for key in keys:
            hadoop.unset(key)
    assert objectstore.settings_of(spark).endpoint is None


def test_the_settings_come_from_s3a_properties_and_keep_the_keys_out_of_sight() -> None:
    conf = {
        "spark.hadoop.fs.s3a.endpoint": "minio.internal:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE",
        "spark.hadoop.fs.s3a.secret.key": "wJalrXUtnFEMI",
    }
    settings = objectstore.S3Settings.of(conf.get)
    assert settings.endpoint == "http://minio.internal:9000"
    assert (settings.access_key, settings.secret_key) == ("AKIDEXAMPLE", "wJalrXUtnFEMI")
    assert "wJalrXUtnFEMI" not in repr(settings) and "AKIDEXAMPLE" not in repr(settings)
    assert settings.options()["endpoint_override"] == "minio.internal:9000"
    assert settings.options()["scheme"] == "http"
    assert settings.options()["force_virtual_addressing"]  # as S3A: path style only when told
    assert objectstore.S3Settings.of({}.get) == objectstore.S3Settings()  # the AWS SDK's own defaults
    assert "endpoint_override" not in objectstore.S3Settings().options()
    # An AWS endpoint names its region; the SDK finds the host itself (virtual-hosted buckets).
    for endpoint, region in [
        ("s3.eu-west-1.amazonaws.com", "eu-west-1"),
        ("https://s3-ap-south-1.amazonaws.com", "ap-south-1"),
        ("s3.dualstack.us-east-2.amazonaws.com", "us-east-2"),
        ("s3.cn-north-1.amazonaws.com.cn", "cn-north-1"),
        ("s3.amazonaws.com", None),
    ]:
        options = objectstore.S3Settings.of({"spark.hadoop.fs.s3a.endpoint": endpoint}.get).options()
        assert "endpoint_override" not in options and options.get("region") == region, endpoint
    assert (
        objectstore.is_s3("s3a://b/k")
        and objectstore.is_s3("S3://b/k")
        and not objectstore.is_s3("hdfs://n/k")
    )


@pytest.mark.parametrize(
    "key",
    [
        "spark.hadoop.fs.s3a.aws.credentials.provider",
        "spark.hadoop.fs.s3a.assumed.role.arn",
        f"spark.hadoop.fs.s3a.bucket.{BUCKET}.endpoint",
    ],
)
def test_s3a_settings_pyarrow_cannot_follow_leave_the_bucket_to_sparks_own_s3a(s3_spark, key: str) -> None:
    """A credentials provider class, an assumed role or per-bucket settings are S3A's alone: with one of
    them the bucket is listed and read by Spark's S3A file system, as before this engine read S3 itself.
    The JVM here has none (no hadoop-aws), so the run stops at the listing, in one line that says so."""
    from ksniff.engine.spark import audit_paths_spark

    s3_spark.conf.set(key, "set-by-the-user")
    try:
        assert objectstore.read_by_spark(s3_spark) == f"{key} is set"
        with pytest.raises(CaptureError) as raised:
            audit_paths_spark([f"s3a://{BUCKET}/anything"], spark=s3_spark)
        assert str(raised.value) == (
            "cannot list the inputs: Spark has no org.apache.hadoop.fs.s3a.S3AFileSystem on its class "
            "path, the file system of s3a:// (add its jars: --conf spark.jars.packages=...) (Spark's own "
            f"S3A file system reads s3 inputs because {key} is set)"
        )
    finally:
        s3_spark.conf.unset(key)
    assert objectstore.read_by_spark(s3_spark) is None


def test_the_tasks_leave_s3_to_spark_when_told(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(objectstore.BY_SPARK_ENV, "1")
    assert objectstore.read_by_spark(spark) == f"{objectstore.BY_SPARK_ENV} is set"
    monkeypatch.setenv(objectstore.BY_SPARK_ENV, "0")
    assert objectstore.read_by_spark(spark) is None
