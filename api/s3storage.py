"""Outputs in an S3-compatible bucket (`VIDEOGEN_STORAGE_URL=s3://bucket/prefix`), so the API and
workers on different machines share them without a shared filesystem. `OutputStorage` (api.storage)
holds one of these as `remote`; everything else keeps using local paths.

    s3://<bucket>/<prefix>/outputs/<job_id>/video.mp4, thumbnail.png, video.mp4.drift.json|.png,
                                            tail.pt, input_reference

The endpoint comes from `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` (MinIO, Ceph, R2, moto...), the
credentials and region from the usual AWS variables or files: boto3 reads them itself. boto3 is
imported only here, only when a bucket is configured (`pip install 'videogen[s3]'`). Every failure
of the bucket is an `ObjectStoreError`, an `OSError` with errno EIO: a worker reports it as the
job's `storage_error`.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

OBJECT_NAMES = ("video.mp4", "thumbnail.png", "video.mp4.drift.json", "video.mp4.drift.png", "tail.pt",
                "input_reference")  # fmt: skip
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class StorageConfigError(ValueError):
    """VIDEOGEN_STORAGE_URL cannot be used: the one line `videogen serve` / `worker` print (exit 2)."""


class ObjectStoreError(OSError):
    def __init__(self, message: str) -> None:
        super().__init__(errno.EIO, message)


def parse_storage_url(url: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (bucket, "prefix/") (prefix "" when none)."""
    parts = urlsplit(url)
    if parts.scheme != "s3":
        raise StorageConfigError(f"VIDEOGEN_STORAGE_URL={url!r}: unknown storage scheme {parts.scheme or '(none)'!r}; "
                                 "expected s3://bucket/prefix (or unset: the local data dir)")  # fmt: skip
    if not parts.netloc:
        raise StorageConfigError(f"VIDEOGEN_STORAGE_URL={url!r}: no bucket; expected s3://bucket/prefix")
    prefix = parts.path.strip("/")
    return parts.netloc, f"{prefix}/" if prefix else ""


class S3ObjectStore:
    def __init__(self, url: str, redirect_seconds: int = 300) -> None:
        self.url = url
        self.bucket, self.prefix = parse_storage_url(url)
        self.redirect_seconds = redirect_seconds
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise StorageConfigError(f"VIDEOGEN_STORAGE_URL={url!r} needs boto3: pip install 'videogen[s3]'") from None
        for name in ("boto3", "botocore", "s3transfer"):  # their INFO lines ("Found credentials...") are noise
            if logging.getLogger(name).level == logging.NOTSET:
                logging.getLogger(name).setLevel(logging.WARNING)
        # Short connect timeout and few retries: an endpoint that does not answer is reported in seconds.
        config = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"})
        try:
            self.client = boto3.session.Session().client("s3", config=config)
        except Exception as exc:  # a bad profile, region or endpoint variable
            raise StorageConfigError(f"VIDEOGEN_STORAGE_URL={url!r}: {_reason(exc, self.bucket, None)}") from None
        self.endpoint = self.client.meta.endpoint_url

    # -- names ----------------------------------------------------------------------------------
    def key(self, job_id: str, name: str = "") -> str:
        return f"{self.prefix}outputs/{job_id}/{name}"

    def _error(self, what: str, exc: Exception) -> ObjectStoreError:
        return ObjectStoreError(f"{what} s3://{self.bucket}/{self.prefix}: {_reason(exc, self.bucket, self.endpoint)}")

    # -- checks ---------------------------------------------------------------------------------
    def problem(self) -> str | None:
        """Why the bucket cannot be used right now (one line, no secrets), or None."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:  # botocore's errors: credentials, endpoint, bucket, access
            return _reason(exc, self.bucket, self.endpoint)
        return None

    # -- objects --------------------------------------------------------------------------------
    def upload(self, path: Path, job_id: str, name: str) -> None:
        try:
            self.client.upload_file(str(path), self.bucket, self.key(job_id, name))
        except Exception as exc:
            raise self._error("upload to", exc) from exc

    def put_bytes(self, data: bytes, job_id: str, name: str) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(job_id, name), Body=data)
        except Exception as exc:
            raise self._error("upload to", exc) from exc

    def download(self, job_id: str, name: str, path: Path) -> bool:
        """The object to `path`; False when it does not exist."""
        try:
            self.client.download_file(self.bucket, self.key(job_id, name), str(path))
            return True
        except Exception as exc:
            if _status(exc) == 404:
                return False
            raise self._error("download from", exc) from exc

    def size(self, job_id: str, name: str) -> int | None:
        """The object's size, None when it does not exist."""
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self.key(job_id, name))["ContentLength"]
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise self._error("read from", exc) from exc

    def open(self, job_id: str, name: str, range_header: str | None = None) -> dict | None:
        """GET the object (one `bytes=` range of it when `range_header` is one; other forms get the
        whole object, as HTTP allows). None when it does not exist; {"unsatisfiable": size} for a
        range past its end. Else: body (chunk iterator), length, content_range (206) or None."""
        kwargs = {"Bucket": self.bucket, "Key": self.key(job_id, name)}
        if range_header and _RANGE.match(range_header.strip()) and range_header.strip() != "bytes=-":
            kwargs["Range"] = range_header.strip()
        try:
            obj = self.client.get_object(**kwargs)
        except Exception as exc:
            status = _status(exc)
            if status == 404:
                return None
            if status == 416:
                return {"unsatisfiable": self.size(job_id, name) or 0}
            raise self._error("read from", exc) from exc
        return {"body": _chunks(obj["Body"]), "length": obj["ContentLength"], "content_range": obj.get("ContentRange"),
                "etag": obj.get("ETag")}  # fmt: skip

    def presign(self, job_id: str, name: str, filename: str, media_type: str) -> str:
        return self.client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket,
                "Key": self.key(job_id, name),
                "ResponseContentType": media_type,
                "ResponseContentDisposition": f'attachment; filename="{filename}"',
            },
            ExpiresIn=self.redirect_seconds,
        )

    def delete(self, job_id: str) -> None:
        """Every object of the job."""
        try:
            listed = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.key(job_id))
            keys = [{"Key": o["Key"]} for o in listed.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
        except Exception as exc:
            raise self._error("delete from", exc) from exc


def _chunks(body, size: int = 1 << 16) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(size)
    finally:
        body.close()


def _status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code", "")
    if code == "NoSuchBucket":  # the server's bucket is gone: not the user's missing file (HEAD cannot tell)
        return 503
    if code in ("404", "NoSuchKey", "NotFound"):
        return 404
    if code in ("416", "InvalidRange"):
        return 416
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _reason(exc: Exception, bucket: str, endpoint: str | None) -> str:
    """botocore's error as one line a person can act on; never a secret."""
    name = type(exc).__name__
    where = endpoint or "the AWS default endpoint"
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError"):
        return f"the endpoint {where} does not answer (AWS_ENDPOINT_URL)"
    if name == "NoRegionError":
        return "no region: set AWS_DEFAULT_REGION"
    status = _status(exc)
    if status == 404 or (status == 503 and "NoSuchBucket" in str(exc)):
        return f"no such bucket {bucket!r} at {where}"
    if status == 403:
        return f"access to bucket {bucket!r} denied at {where} (check the credentials)"
    return f"{name}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
