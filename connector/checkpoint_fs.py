"""The checkpoint filesystem: how the driver-side helpers reach a streaming query's checkpoint.

Spark writes the checkpoint through Hadoop's FileSystem; SinkCheckback reads its commit log
(`commits/<batch>`) and TransactionalBatch keeps its manifests beside it. Both go through
`CheckpointDir`, which opens the same location with pyarrow.fs, so a checkpoint on a local path,
on an S3-compatible store (`s3a://bucket/key`, `s3://`) or on HDFS (`hdfs://`, needs libhdfs)
works alike. S3 settings are the ones Spark's checkpoint uses: the session's
`spark.hadoop.fs.s3a.{endpoint,access.key,secret.key,endpoint.region,connection.ssl.enabled}`,
or a pyarrow FileSystem given explicitly.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

import pyarrow.fs as pafs

from .options import InvalidOption, without_file_scheme

_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]+)://(?P<authority>[^/]*)(?P<path>/.*)?$")
_S3_SCHEMES = ("s3a", "s3", "s3n")


@dataclass(frozen=True)
class S3Settings:
    """An S3-compatible store as Hadoop's S3A names it (fs.s3a.*)."""

    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    region: str | None = None
    ssl: bool = True

    @staticmethod
    def from_hadoop_conf(conf: Mapping[str, str]) -> "S3Settings":
        """From `fs.s3a.*` keys (with or without Spark's `spark.hadoop.` prefix)."""
        def get(key: str) -> str | None:
            return conf.get(f"spark.hadoop.fs.s3a.{key}") or conf.get(f"fs.s3a.{key}") or None

        ssl = (get("connection.ssl.enabled") or "true").strip().lower() != "false"
        return S3Settings(get("endpoint"), get("access.key"), get("secret.key"), get("endpoint.region"), ssl)

    def filesystem(self) -> pafs.S3FileSystem:
        endpoint, scheme = self.endpoint, "https" if self.ssl else "http"
        if endpoint and "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
        kwargs: dict[str, object] = {"scheme": scheme}
        if endpoint:
            kwargs["endpoint_override"] = endpoint.rstrip("/")
        if self.access_key and self.secret_key:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key)
        kwargs["region"] = self.region or "us-east-1"  # S3-compatible stores accept any; skips a lookup
        return pafs.S3FileSystem(**kwargs)


def _spark_hadoop_conf() -> dict[str, str]:
    """The active SparkSession's `spark.hadoop.fs.s3a.*` settings, or {} outside a Spark driver."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return {}
    session = SparkSession.getActiveSession()
    if session is None:
        return {}
    keys = ("endpoint", "access.key", "secret.key", "endpoint.region", "connection.ssl.enabled")
    conf = {}
    for key in keys:
        value = session.conf.get(f"spark.hadoop.fs.s3a.{key}", None)
        if value is not None:
            conf[f"fs.s3a.{key}"] = value
    return conf


class CheckpointDir:
    """A checkpoint location on its own filesystem: list, read and atomically write its files."""

    def __init__(self, location: str, *, helper: str, filesystem: pafs.FileSystem | None = None) -> None:
        self.location = location
        self.fs, self.root = _resolve(location, helper=helper, filesystem=filesystem)
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    def _path(self, relative: str) -> str:
        return f"{self.root.rstrip('/')}/{relative}"

    def names(self, relative: str) -> list[str]:
        """The entries of a directory of the checkpoint ([] if it does not exist yet)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self._path(relative), allow_not_found=True))
        return [info.base_name for info in infos]

    def read(self, relative: str) -> bytes | None:
        """A file's bytes, or None if it does not exist."""
        try:
            with self.fs.open_input_stream(self._path(relative)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, relative: str, data: bytes) -> None:
        """Replace a file atomically: readers see the old bytes or the new, never a part."""
        path = self._path(relative)
        if not self._local:
            # an object store's PUT is atomic (a whole object or none); there are no directories to make
            with self.fs.open_output_stream(path) as f:
                f.write(data)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the manifest must outlive a power cut before the local transaction
        os.replace(tmp, path)


def is_local(location: str) -> bool:
    """Whether `location` is a path on this host's file system (plain, or file:)."""
    return _URI.match(without_file_scheme(location)) is None and not re.match(r"^[A-Za-z][A-Za-z0-9+.\-]+:",
                                                                            without_file_scheme(location))


def _resolve(location: str, *, helper: str, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    path = without_file_scheme(location)
    match = _URI.match(path)
    if match is None:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]+:", path):
            raise InvalidOption(f"txmq {helper}: checkpoint location {location!r} is neither a local path nor "
                                "a URI with a host part (s3a://bucket/key, hdfs://namenode:port/path)")
        return filesystem or pafs.LocalFileSystem(), os.path.abspath(path)
    scheme, authority, rest = match["scheme"].lower(), match["authority"], (match["path"] or "/")
    if scheme in _S3_SCHEMES:
        fs = filesystem or S3Settings.from_hadoop_conf(_spark_hadoop_conf()).filesystem()
        return fs, f"{authority}{rest}".rstrip("/")  # pyarrow's S3 paths are bucket/key
    if scheme in ("hdfs", "viewfs"):
        if filesystem is None:
            try:
                filesystem = pafs.HadoopFileSystem.from_uri(f"{scheme}://{authority}")
            except OSError as e:
                raise InvalidOption(f"txmq {helper}: cannot open {location!r} with pyarrow's HadoopFileSystem "
                                    f"(it needs libhdfs, HADOOP_HOME and CLASSPATH): {e}") from None
        return filesystem, rest
    if filesystem is None:
        raise InvalidOption(f"txmq {helper}: checkpoint location {location!r}: no filesystem known for "
                            f"{scheme}:// (local paths, s3a://, s3://, hdfs:// are); pass a pyarrow.fs "
                            "FileSystem as checkpoint_filesystem")
    return filesystem, f"{authority}{rest}"
