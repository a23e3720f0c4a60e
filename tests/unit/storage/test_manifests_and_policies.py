"""The documents the storage service hands to others, built without I/O: the Kubernetes
claim and Secret of a storage (manifests.py), the IAM policies that scope an accessor
or the service's own user (s3_backend.py, minio_access.py), an accessor's public view
(accessors.py), and how an RGW answer is read back (rgw_backend.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from gpucloud_libs.naming import (
    INSTANCE_LABEL,
    MANAGED_LABEL,
    STORAGE_LABEL,
    TENANT_LABEL,
    storage_claim_name,
    storage_secret_name,
)
from gpucloud_storage.accessors import accessor_view
from gpucloud_storage.documents import AccessorDoc
from gpucloud_storage.manifests import credentials_secret, volume_claim
from gpucloud_storage.minio_access import BUCKET_PREFIX, storage_policy
from gpucloud_storage.rgw_backend import _error_code, _flat
from gpucloud_storage.s3_backend import bucket_policy, iso_seconds

AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
READ = ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"]


# --- Kubernetes objects ----------------------------------------------------------------


def test_a_volume_claim_asks_for_the_storages_bytes_in_its_class_and_mode() -> None:
    claim = volume_claim(
        "gpc-acme", "acme", "scratch", size_bytes=20 * 1024**3,
        storage_class="fast-nvme", access_mode="ReadWriteMany",
    )  # fmt: skip
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["metadata"]["name"] == storage_claim_name("scratch")
    assert claim["metadata"]["namespace"] == "gpc-acme"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "fast-nvme",
        "resources": {"requests": {"storage": "21474836480"}},
    }


def test_a_volume_claim_is_labelled_as_the_platforms_and_its_tenants() -> None:
    labels = volume_claim(
        "ns", "acme", "scratch", size_bytes=1, storage_class="c", access_mode="ReadWriteOnce"
    )["metadata"]["labels"]
    assert labels == {MANAGED_LABEL: "true", TENANT_LABEL: "acme", STORAGE_LABEL: "scratch"}


def test_an_instances_credentials_secret_carries_the_variables_as_they_are() -> None:
    variables = {"AWS_ACCESS_KEY_ID": "GPCABC", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "BUCKET": "b"}
    secret = credentials_secret("gpc-acme", "acme", "models", "i-1", variables)
    assert (secret["kind"], secret["type"]) == ("Secret", "Opaque")
    assert secret["stringData"] == variables
    assert secret["metadata"]["name"] == storage_secret_name("models", "i-1")
    assert secret["metadata"]["labels"] == {
        MANAGED_LABEL: "true", TENANT_LABEL: "acme", STORAGE_LABEL: "models", INSTANCE_LABEL: "i-1",
    }  # fmt: skip


def test_two_instances_of_one_storage_get_secrets_of_their_own() -> None:
    first = credentials_secret("ns", "acme", "models", "i-1", {})
    second = credentials_secret("ns", "acme", "models", "i-2", {})
    assert first["metadata"]["name"] != second["metadata"]["name"]


# --- IAM policies ----------------------------------------------------------------------


def test_a_read_only_policy_reads_one_bucket_and_its_objects_and_nothing_else() -> None:
    policy = bucket_policy("gpc-abc", "read-only")
    assert policy == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": READ,
                "Resource": ["arn:aws:s3:::gpc-abc", "arn:aws:s3:::gpc-abc/*"],
            }
        ],
    }


def test_a_read_write_policy_adds_writes_deletes_and_multipart_uploads() -> None:
    (statement,) = bucket_policy("gpc-abc", "read-write")["Statement"]
    assert statement["Action"][:3] == READ
    assert set(statement["Action"][3:]) == {
        "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts", "s3:ListBucketMultipartUploads",
    }  # fmt: skip
    assert "Condition" not in statement


def test_a_policy_with_an_end_allows_only_before_that_instant_in_utc() -> None:
    until = datetime(2027, 3, 1, 14, 30, 15, 999_000, tzinfo=timezone(timedelta(hours=2)))
    (statement,) = bucket_policy("b", "read-only", until=until)["Statement"]
    assert statement["Condition"] == {"DateLessThan": {"aws:CurrentTime": "2027-03-01T12:30:15Z"}}


def test_an_instant_is_written_in_utc_to_the_second() -> None:
    assert iso_seconds(datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
    pacific = timezone(timedelta(hours=-8))
    assert iso_seconds(datetime(2026, 12, 31, 20, 0, tzinfo=pacific)) == "2027-01-01T04:00:00Z"


def test_the_services_own_user_reaches_only_the_platforms_buckets_and_its_admin_calls() -> None:
    statements = storage_policy()["Statement"]
    buckets = f"arn:aws:s3:::{BUCKET_PREFIX}*"
    assert statements[0] == {
        "Effect": "Allow", "Action": ["s3:*"], "Resource": [buckets, f"{buckets}/*"],
    }  # fmt: skip
    admin = {action for statement in statements for action in statement["Action"]
             if action.startswith("admin:")}  # fmt: skip
    assert admin == {"admin:SetBucketQuota", "admin:GetBucketQuota", "admin:DataUsageInfo"}
    # Making service accounts for other users (root included) is never granted.
    assert "admin:CreateServiceAccount" not in admin
    # s3:* is granted on the platform's buckets only, never on every bucket.
    assert all(
        statement["Resource"] != ["arn:aws:s3:::*"]
        for statement in statements
        if "s3:*" in statement["Action"]
    )


# --- an accessor's view ----------------------------------------------------------------


def test_an_accessors_view_never_shows_who_made_it_or_a_secret() -> None:
    doc: AccessorDoc = {
        "_id": "GPCABCDEFGHIJKLMNOPQ", "tenant_id": "acme", "storage_id": "models",
        "name": "ci", "mode": "read-write", "expires_at": AT + timedelta(days=30),
        "instance_id": None, "created_by": "u-1", "created_at": AT,
    }  # fmt: skip
    view = accessor_view(doc).model_dump(by_alias=True)
    assert view == {
        "accessorID": "GPCABCDEFGHIJKLMNOPQ", "storageID": "models", "name": "ci",
        "mode": "read-write", "expiresAt": AT + timedelta(days=30), "instanceID": None,
        "createdAt": AT,
    }  # fmt: skip


def test_an_instances_accessor_names_its_instance() -> None:
    doc: AccessorDoc = {
        "_id": "GPCK", "tenant_id": "acme", "storage_id": "models", "name": None,
        "mode": "read-only", "expires_at": None, "instance_id": "i-7",
        "created_by": "service:instances", "created_at": AT,
    }  # fmt: skip
    assert accessor_view(doc).instance_id == "i-7"


# --- RGW's answers ---------------------------------------------------------------------


def test_an_rgw_error_code_is_read_from_a_json_admin_ops_body() -> None:
    assert _error_code(b'{"Code": "NoSuchUser", "RequestId": "tx1"}') == "NoSuchUser"
    assert _error_code(b'{"Message": "no code here"}') == ""


def test_an_rgw_error_code_is_read_from_an_xml_iam_body() -> None:
    body = b"<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>"
    assert _error_code(body) == "AccessDenied"


def test_a_body_that_is_neither_gives_its_start_as_the_code() -> None:
    assert _error_code(b"") == ""
    assert _error_code(b"Bad Gateway " + b"x" * 200) == ("Bad Gateway " + "x" * 200)[:100]
    # JSON that is not an object is said as it came, not a crash.
    assert _error_code(b'"x"') == '"x"'
    assert _error_code(b"[1]") == "[1]"


def test_signed_headers_are_flattened_to_one_value_each() -> None:
    assert _flat({"Host": "rgw:7480", "X-Multi": ["a", "b"], "X-One": ("c",)}) == {
        "Host": "rgw:7480", "X-Multi": "a, b", "X-One": "c",
    }  # fmt: skip
