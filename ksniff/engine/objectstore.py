"""Captures in an S3 bucket (`s3a://`, `s3://`, `s3n://`), listed and read without the JVM.

Through Spark's own Hadoop file system a capture in a bucket comes to its task whole, as one binaryFile
row: several times its size in the executor's heap, and about 30 s of the JVM's CPU per GB (bench/README,
"Capture sets on other file systems audited where they are read"); and listing it at all needs the
hadoop-aws jars on Spark's class path. Here the driver lists the bucket and each task copies the objects
it reads to its local disk itself, CHUNK_BYTES at a time, through pyarrow's S3 file system (the AWS SDK
for C++, part of every pyarrow wheel): the task's memory holds one chunk, whatever the capture's size,
and Spark needs nothing more than it has.

Where the bucket is and who asks are the run's `fs.s3a.*` settings, as Hadoop's S3A file system takes
them (`--conf spark.hadoop.fs.s3a.endpoint=...`): the endpoint, its region, path-style access, the keys.
Whatever is not set is found the AWS SDK's way (its environment variables, ~/.aws, the instance's
role), which is also where a cluster's executors find theirs.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import quote, unquote, urlsplit

SCHEMES = ("s3", "s3a", "s3n")
CHUNK_BYTES = 8 << 20  # of an object copied to a task's disk at a time

# The Spark properties read, as Hadoop's S3A names them (behind `spark.hadoop.`).
_PREFIX = "spark.hadoop.fs.s3a."


def is_s3(uri: str) -> bool:
    """Whether `uri` names an object (or a folder of objects) in an S3 bucket."""
    scheme, sep, _rest = uri.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def _key(uri: str) -> str:
    """pyarrow's name for the object `uri` names: bucket/key, without a trailing slash."""
    parts = urlsplit(uri)
    return (parts.netloc + unquote(parts.path)).rstrip("/")


class StoreError(Exception):
    """A bucket or object that could not be listed or read, in one line."""


@dataclass(frozen=True)
class S3Settings:
    """How tasks reach the bucket: the run's fs.s3a settings (None: the AWS SDK's own default)."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False  # the bucket in the path (MinIO, Ceph) rather than in the host name
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, get: Any) -> S3Settings:
        """From `get(name)`, a Spark property's value or None (`spark.conf.get(name, None)`)."""

        def one(name: str) -> str | None:
            value = get(_PREFIX + name)
            return value.strip() or None if isinstance(value, str) else None

        endpoint = one("endpoint")
        if endpoint and "://" not in endpoint:
            ssl = (one("connection.ssl.enabled") or "true").lower() != "false"
            endpoint = f"{'https' if ssl else 'http'}://{endpoint}"
        return cls(
            endpoint=endpoint,
            region=one("endpoint.region") or one("region"),
            path_style=(one("path.style.access") or "false").lower() == "true",
            access_key=one("access.key"),
            secret_key=one("secret.key"),
            session_token=one("session.token"),
        )

    def filesystem(self) -> Any:
        """pyarrow's S3 file system for these settings (one per process and settings)."""
        made = _FILESYSTEMS.get(self)
        if made is None:
            from pyarrow import fs

            made = _FILESYSTEMS[self] = fs.S3FileSystem(**self.options())
        return made

    def options(self) -> dict[str, Any]:
        """pyarrow's S3FileSystem arguments for these settings, as Hadoop's S3A reads the same: an AWS
        endpoint (s3.REGION.amazonaws.com) names the region, and the SDK finds the host itself; any other
        is the host asked, with the bucket in the host name unless path-style access is set."""
        options: dict[str, Any] = {}
        region = self.region
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            host = parts.netloc or parts.path
            name = host.split(":")[0].lower()
            if name.endswith((".amazonaws.com", ".amazonaws.com.cn")) or name == "amazonaws.com":
                labels = name.split(".")
                head = labels[: labels.index("amazonaws")]  # s3.REGION, s3-REGION, s3.dualstack.REGION
                named = [
                    x.removeprefix("s3-") for x in head if x not in ("s3", "dualstack", "fips", "s3-fips")
                ]
                region = region or (named[0] if named else None)
            else:
                options["endpoint_override"] = host
                options["scheme"] = parts.scheme or "https"
        options["force_virtual_addressing"] = not self.path_style
        if region:
            options["region"] = region
        if self.access_key and self.secret_key:
            options["access_key"] = self.access_key
            options["secret_key"] = self.secret_key
            if self.session_token:
                options["session_token"] = self.session_token
        return options

    def listed(self, uri: str) -> list[tuple[str, int]]:
        """(URI, size) of the object `uri` names, or of every object under it (a folder: its prefix) but
        hidden ones (`_hidden`), in the URI's own scheme; [] when there is nothing there."""
        from pyarrow import fs

        s3 = self.filesystem()
        key = _key(uri)
        scheme = uri.partition("://")[0]
        try:
            info = s3.get_file_info(key)
            if info.type == fs.FileType.File:
                return [(uri, info.size)]
            if info.type != fs.FileType.Directory:
                return []
            found = s3.get_file_info(fs.FileSelector(key, recursive=True))
        except (OSError, ValueError) as exc:
            raise StoreError(f"{uri}: cannot list: {_reason(exc)}") from None
        return [
            (f"{scheme}://{quote(i.path, safe='/')}", i.size)  # a key may hold ?, # or %: as a URI's path
            for i in found
            if i.type == fs.FileType.File and not _hidden(i.path[len(key) + 1 :])
        ]

    def copy(self, uri: str, out: BinaryIO) -> int:
        """The object's bytes into `out`, CHUNK_BYTES at a time; how many."""
        n = 0
        try:
            with self.filesystem().open_input_stream(_key(uri)) as src:
                while chunk := src.read(CHUNK_BYTES):
                    out.write(chunk)
                    n += len(chunk)
        except (OSError, ValueError) as exc:
            raise StoreError(f"{uri}: cannot read: {_reason(exc)}") from None
        return n


_FILESYSTEMS: dict[S3Settings, Any] = {}


def _hidden(rel: str) -> bool:
    """Whether a folder's listing leaves the object out, as Spark's does on every file system: a name
    (of the object or of a folder below the listed one) starting with `.` or `_`."""
    return any(part.startswith((".", "_")) for part in rel.split("/"))


def _reason(exc: Exception) -> str:
    """pyarrow's message on one line, without the AWS SDK's detail after it."""
    text = " ".join(str(exc).split())
    for cut in (". Detail:", " Detail:"):
        text = text.split(cut, 1)[0]
    if isinstance(exc, FileNotFoundError):
        return "no such object"
    return text or type(exc).__name__


# fs.s3a settings pyarrow's S3 file system cannot follow (a credentials provider class, an assumed role,
# per-bucket settings): with any of them, Spark's own S3A file system reads the bucket, as it reads any
# other file system's files (binaryFile; it needs the hadoop-aws jars). So does KSNIFF_S3_BY_SPARK=1.
_SPARK_ONLY = ("aws.credentials.provider", "assumed.role.", "bucket.")
BY_SPARK_ENV = "KSNIFF_S3_BY_SPARK"


def read_by_spark(spark: Any) -> str | None:
    """Why Spark's own S3A file system lists and reads this run's S3 inputs (None: the tasks do)."""
    if os.environ.get(BY_SPARK_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return f"{BY_SPARK_ENV} is set"
    for key in _property_names(spark):
        if key.startswith(_PREFIX) and key[len(_PREFIX) :].startswith(_SPARK_ONLY):
            return f"{key} is set"
    return None


def _property_names(spark: Any) -> list[str]:
    """The names of the Spark properties the run was given (what can be asked without the JVM's help)."""
    with contextlib.suppress(Exception):
        return [k for k, _v in spark.sparkContext.getConf().getAll()] + list(spark.conf.getAll)
    with contextlib.suppress(Exception):
        return list(spark.conf.getAll)  # Spark Connect: a property of the session
    return []


def settings_of(spark: Any) -> S3Settings:
    """The run's S3 settings: each from its Spark properties (`spark.hadoop.fs.s3a.*`, Spark Connect's
    too), else from the driver's Hadoop configuration (core-site.xml under HADOOP_CONF_DIR, where a
    cluster's S3A settings often are)."""
    hadoop = None
    with contextlib.suppress(Exception):
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()

    def get(name: str) -> str | None:
        with contextlib.suppress(Exception):
            value = spark.conf.get(name, None)
            if value is not None:
                return value
        if hadoop is not None:
            with contextlib.suppress(Exception):
                return hadoop.get(name.removeprefix("spark.hadoop."))
        return None

    return S3Settings.of(get)


_USED: list[S3Settings | None] = [None]  # the settings of the task running in this process


def use(settings: S3Settings | None) -> None:
    """The settings the tasks that run next in this process read objects with."""
    _USED[0] = settings


def copy(uri: str, out: BinaryIO) -> int:
    """The object `uri` names into `out`, read with `use`'s settings (StoreError when it cannot be)."""
    return (_USED[0] or S3Settings()).copy(uri, out)
