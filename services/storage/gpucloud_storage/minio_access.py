"""The storage service's own MinIO user: the operator's step, run as root.

The storage service never holds MinIO's root credentials. It signs in as
`gpucloud-storage`, whose policy reaches only the platform's buckets (`gpc-*`)
and the admin calls it makes (bucket quotas, usage). Accessors and presigners
are service accounts of that user, so they can never reach further than it.
Run it as `python -m gpucloud_storage.minio_access` with the root credentials in
GPUCLOUD_S3_ACCESS_KEY / GPUCLOUD_S3_SECRET_KEY and the user's in
GPUCLOUD_MINIO_STORAGE_USER / GPUCLOUD_MINIO_STORAGE_PASSWORD. It is idempotent.
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlparse

from minio import MinioAdmin
from minio.credentials.providers import StaticProvider
from minio.error import MinioAdminException

POLICY = "gpucloud-storage"
#: Every bucket the storage service makes is named so (storages.py).
BUCKET_PREFIX = "gpc-"


def storage_policy() -> dict[str, Any]:
    buckets = f"arn:aws:s3:::{BUCKET_PREFIX}*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:*"], "Resource": [buckets, f"{buckets}/*"]},
            {"Effect": "Allow", "Action": ["s3:ListAllMyBuckets"], "Resource": ["arn:aws:s3:::*"]},
            {
                "Effect": "Allow",
                # Not admin:CreateServiceAccount: that would make keys for any user,
                # root included. A user makes its own service accounts without it.
                "Action": ["admin:SetBucketQuota", "admin:GetBucketQuota", "admin:DataUsageInfo"],
            },
        ],
    }


def apply(endpoint: str, root: tuple[str, str], user: tuple[str, str], region: str) -> None:
    url = urlparse(endpoint)
    admin = MinioAdmin(
        endpoint=url.netloc,
        credentials=StaticProvider(*root),
        region=region,
        secure=url.scheme == "https",
    )
    admin.policy_add(POLICY, policy=storage_policy())
    admin.user_add(*user)
    try:
        admin.attach_policy([POLICY], user=user[0])
    except MinioAdminException as error:
        if "already" not in str(error._body).lower():  # attached on an earlier run
            raise


def main() -> None:
    if len(sys.argv) > 1:
        print(__doc__)
        sys.exit(0 if sys.argv[1] in {"-h", "--help"} else 2)
    env = os.environ
    try:
        apply(
            env.get("GPUCLOUD_S3_ENDPOINT", "http://127.0.0.1:9000"),
            (env["GPUCLOUD_S3_ACCESS_KEY"], env["GPUCLOUD_S3_SECRET_KEY"]),
            (env["GPUCLOUD_MINIO_STORAGE_USER"], env["GPUCLOUD_MINIO_STORAGE_PASSWORD"]),
            env.get("GPUCLOUD_S3_REGION", "us-east-1"),
        )
    except KeyError as missing:
        print(f"minio access: {missing} is not set", file=sys.stderr)
        sys.exit(2)
    except MinioAdminException as error:
        print(f"minio access: MinIO refused: {error._body}"[:500], file=sys.stderr)
        sys.exit(1)
    print(f"minio access: user {env['GPUCLOUD_MINIO_STORAGE_USER']} with policy {POLICY}")


if __name__ == "__main__":
    main()
