"""The plain backend: every request through boto3's S3 client (botocore's request pipeline,
retries and connection pool), configured by the `files` entry of STORAGES (django-storages'
S3Storage options: endpoint, region, credentials, client config)."""

import contextlib
import http.client
import threading
from collections.abc import Iterator

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from django.core.files.storage import storages

from files.storage.base import (
    CHECKSUM_ALGORITHM,
    ObjectStoreBackend,
    ObjectStream,
    StorageObjectMissing,
    body_checksum,
    unavailable,
)

MISSING_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchUpload"}


def configured_session() -> tuple[boto3.session.Session, dict]:
    """A boto3 session with the credentials STORAGES["files"] names, and the arguments of an S3
    client for its store (what django-storages' own connection is built from)."""
    options = storages["files"]
    if options.session_profile:
        session = boto3.session.Session(profile_name=options.session_profile)
    else:
        session = boto3.session.Session(
            aws_access_key_id=options.access_key,
            aws_secret_access_key=options.secret_key,
            aws_session_token=options.security_token,
        )
    client_kwargs = {
        "region_name": options.region_name,
        "use_ssl": options.use_ssl,
        "endpoint_url": options.endpoint_url,
        "config": options.client_config,
        "verify": options.verify,
    }
    return session, client_kwargs


@contextlib.contextmanager
def translate_errors(*, missing_ok: bool = False):
    """botocore's exceptions as StorageObjectMissing / StorageUnavailable."""
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if code in MISSING_CODES or status == 404:
            if missing_ok:
                return
            raise StorageObjectMissing(code or "404") from exc
        raise unavailable(code or str(status), exc) from exc
    except BotoCoreError as exc:
        raise unavailable(type(exc).__name__, exc) from exc


class Boto3Backend(ObjectStoreBackend):
    """`client`: a boto3 S3 client (thread-safe, one per process: building one reads the
    service model's JSON, a noticeable CPU cost); `credentials`: its session's (kept for
    backends that sign requests themselves)."""

    def __init__(self, *, client, credentials, bucket: str):
        self.client = client
        self.credentials = credentials
        self.bucket = bucket

    @classmethod
    def from_settings(cls, *, bucket: str) -> "Boto3Backend":
        session, client_kwargs = configured_session()
        return cls(client=session.client("s3", **client_kwargs), credentials=session.get_credentials(), bucket=bucket)

    def ping(self) -> None:
        with translate_errors():
            self.client.head_bucket(Bucket=self.bucket)

    def put_object(self, *, key: str, body, content_type: str) -> None:
        with translate_errors():
            self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, ChecksumCRC32C=body_checksum(body)
            )

    def multipart_start(self, *, key: str, content_type: str) -> str:
        with translate_errors():
            return self.client.create_multipart_upload(
                Bucket=self.bucket, Key=key, ContentType=content_type, ChecksumAlgorithm=CHECKSUM_ALGORITHM
            )["UploadId"]

    def multipart_upload_part(self, *, key: str, upload_id: str, part_number: int, body) -> dict:
        checksum = body_checksum(body)
        with translate_errors():
            response = self.client.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=part_number,
                Body=body,
                ChecksumCRC32C=checksum,
            )
        return {"ETag": response["ETag"], "ChecksumCRC32C": checksum}

    def multipart_complete(self, *, key: str, upload_id: str, parts: list[dict]) -> None:
        numbered = [{"PartNumber": number, **part} for number, part in enumerate(parts, start=1)]
        with translate_errors():
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": numbered}
            )

    def multipart_abort(self, *, key: str, upload_id: str) -> None:
        with translate_errors(missing_ok=True):
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)

    def delete_object(self, *, key: str) -> None:
        with translate_errors(missing_ok=True):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def copy_object(self, *, source_key: str, key: str, content_type: str) -> None:
        with translate_errors():
            self.client.copy_object(
                Bucket=self.bucket,
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": source_key},
                ContentType=content_type,
                MetadataDirective="REPLACE",
            )

    def head_object(self, *, key: str) -> dict | None:
        try:
            with translate_errors():
                response = self.client.head_object(Bucket=self.bucket, Key=key)
        except StorageObjectMissing:
            return None
        return {"size": response["ContentLength"]}

    def open_object(self, *, key: str, first: int | None, last: int | None, chunk_size: int) -> ObjectStream:
        kwargs = {"Bucket": self.bucket, "Key": key}
        if first is not None:
            kwargs["Range"] = f"bytes={first}-{'' if last is None else last}"
        with translate_errors():
            return BotoObjectStream(self.client.get_object(**kwargs)["Body"], chunk_size=chunk_size)

    def list_objects(self, *, prefix: str) -> Iterator[dict]:
        paginator = self.client.get_paginator("list_objects_v2")
        with translate_errors():
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield {"key": item["Key"], "size": item["Size"], "last_modified": item["LastModified"]}

    def list_multipart_uploads(self, *, prefix: str) -> Iterator[dict]:
        paginator = self.client.get_paginator("list_multipart_uploads")
        with translate_errors():
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Uploads", []):
                    yield {"key": item["Key"], "upload_id": item["UploadId"], "initiated": item.get("Initiated")}


class BotoObjectStream(ObjectStream):
    """botocore's StreamingBody, read through its public read() (which checks the length once the
    body ends). Not spliceable. abort() closes the body; a read already blocked on the store
    then ends at the client's read timeout at the latest."""

    def __init__(self, body, *, chunk_size: int):
        self.chunk_size = chunk_size
        self._body = body
        self._lock = threading.Lock()

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self.chunk_size
        try:
            with translate_errors():
                return self._body.read(size)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise unavailable(type(exc).__name__, exc) from exc

    def abort(self) -> None:
        with self._lock, contextlib.suppress(Exception):
            self._body.close()

    def close(self) -> None:
        with self._lock:
            self._body.close()
