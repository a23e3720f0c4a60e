"""Ceph RGW behind `ObjectBackend`: the S3 calls of `S3Backend` plus RGW's admin-ops
and IAM APIs, signed with the storage service's own RGW user.

- A bucket's hard quota is RGW's bucket quota (`PUT /admin/bucket?quota`).
- An accessor (or a storage's presigner) is an RGW user of its own that owns no
  bucket and may create none, with one inline IAM user policy naming its bucket
  and, when it expires, a `DateLessThan aws:CurrentTime` condition: RGW keeps no
  key expiry, the policy does it. Revoking deletes the user, so its key is
  refused at its next request. One document per accessor, written once, so
  concurrent grants never race on a shared bucket policy (decision 74).
- Usage is RGW's own bucket statistics (`GET /admin/bucket?stats`).

The storage service's user is made by the operator with the caps in
docs/storage.md; it is never an RGW system user.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from functools import cached_property
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import urllib3
from minio.credentials.credentials import Credentials
from minio.signer import sign_v4_s3

from .backend import AccessMode, BackendError
from .minio_access import BUCKET_PREFIX
from .s3_backend import S3Backend, bucket_policy

#: The accessor's inline policy; a user holds just this one.
_POLICY_NAME = "gpucloud-bucket"
#: Admin-ops calls cannot verify a signed body (RGW answers 501), so they sign none.
_UNSIGNED = "UNSIGNED-PAYLOAD"


class RgwBackend(S3Backend):
    @cached_property
    def _http(self) -> urllib3.PoolManager:
        return urllib3.PoolManager(num_pools=2, maxsize=8, retries=False)

    def _call(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        *,
        body: bytes = b"",
        form: dict[str, str] | None = None,
    ) -> Any:
        """One signed admin-ops (query) or IAM (form) request; its JSON answer or None."""
        if form is not None:
            body = urlencode(form).encode()
        url = urlsplit(f"{self._endpoint.scheme}://{self._endpoint.netloc}{path}")
        # SigV4's canonical query escapes everything but unreserved characters.
        url = url._replace(query=urlencode(query, quote_via=quote, safe="-_.~"))
        now = datetime.now(UTC)
        content_sha256 = hashlib.sha256(body).hexdigest() if form is not None else _UNSIGNED
        headers: dict[str, str | list[str] | tuple[str]] = {
            "Host": url.netloc,
            "x-amz-date": now.strftime("%Y%m%dT%H%M%SZ"),
            "x-amz-content-sha256": content_sha256,
        }
        if form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        signed = sign_v4_s3(
            method=method, url=url, region=self.region, headers=headers,
            credentials=Credentials(self._own.access_key, self._own.secret_key), content_sha256=content_sha256, date=now,
        )  # fmt: skip
        response = self._http.request(
            method, url.geturl(), body=body or None, headers=_flat(signed), timeout=30.0
        )
        if response.status >= 300:
            code = _error_code(response.data)
            raise BackendError(f"RGW {path} answered {response.status} {code}", code)
        if not response.data or form is not None:
            return None
        return json.loads(response.data)

    async def start(self) -> None:
        """Let the service's own user read what accessors write into its buckets: RGW
        makes the writer an object's owner, and the object's ACL alone would keep the
        bucket's owner out (sizes, downloads and copies for a tenant)."""
        buckets = f"arn:aws:s3:::{BUCKET_PREFIX}*"
        own = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:*"], "Resource": [buckets, f"{buckets}/*"]}
            ],
        }
        await self._run(lambda: self._put_user_policy(self._own.access_key, own))

    def _put_user_policy(self, user: str, policy: dict[str, Any]) -> None:
        self._call(
            "POST", "/", {},
            form={
                "Action": "PutUserPolicy", "UserName": user, "PolicyName": _POLICY_NAME,
                "PolicyDocument": json.dumps(policy),
            },
        )  # fmt: skip

    def _set_quota(self, bucket: str, quota_bytes: int) -> None:
        quota = {"enabled": True, "max_size": quota_bytes, "max_objects": -1}
        self._call(
            "PUT", "/admin/bucket", {"quota": "", "uid": self._own.access_key, "bucket": bucket},
            body=json.dumps(quota).encode(),
        )  # fmt: skip

    async def create_bucket(self, bucket: str, quota_bytes: int) -> None:
        def create() -> None:
            self._make_bucket(bucket)
            self._set_quota(bucket, quota_bytes)

        await self._run(create)

    async def set_quota(self, bucket: str, quota_bytes: int) -> None:
        await self._run(lambda: self._set_quota(bucket, quota_bytes))

    async def bucket_usage(self) -> dict[str, int]:
        buckets = await self._run(
            lambda: self._call(
                "GET", "/admin/bucket", {"stats": "true", "uid": self._own.access_key}
            )
        )
        return {
            entry["bucket"]: int((entry.get("usage") or {}).get("rgw.main", {}).get("size", 0))
            for entry in buckets or []
        }

    async def create_credential(
        self,
        *,
        access_key: str,
        secret_key: str,
        bucket: str,
        mode: AccessMode,
        expires_at: datetime | None,
        description: str,
    ) -> None:
        def create() -> None:
            # max-buckets -1: the user can create no bucket of its own.
            self._call(
                "PUT", "/admin/user",
                {
                    "uid": access_key, "display-name": description[:128] or access_key,
                    "access-key": access_key, "secret-key": secret_key, "max-buckets": "-1",
                },
            )  # fmt: skip
            try:
                self._put_user_policy(access_key, bucket_policy(bucket, mode, until=expires_at))
            except BackendError:
                self._delete_user(access_key)  # a user without its policy reaches nothing
                raise

        await self._run(create)

    def _delete_user(self, user: str) -> None:
        try:
            self._call("DELETE", "/admin/user", {"uid": user, "purge-data": "false"})
        except BackendError as error:
            if error.code != "NoSuchUser":
                raise

    async def revoke_credential(self, access_key: str) -> None:
        await self._run(lambda: self._delete_user(access_key))


def _flat(headers: dict[str, str | list[str] | tuple[str]]) -> dict[str, str]:
    return {
        name: value if isinstance(value, str) else ", ".join(value)
        for name, value in headers.items()
    }


def _error_code(data: bytes) -> str:
    """RGW's error code from a JSON (admin ops) or XML (IAM) error body."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if isinstance(body, dict):
        return str(body.get("Code", ""))
    text = data.decode(errors="replace")  # XML, or whatever came
    start = text.find("<Code>")
    return text[start + 6 : text.find("</Code>")] if start >= 0 else text[:100]
