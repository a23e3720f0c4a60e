"""Presigned URLs as the S3 half of the backend signs them, with no network: they name
the endpoint clients reach, the storage's own key pair and region, and their signature
holds under that pair's secret only (s3_backend.py, backend.py)."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl, quote, urlsplit

from gpucloud_storage.backend import Credential
from gpucloud_storage.s3_backend import S3Backend

SERVICE = Credential("service-user", "service-secret-value")
SIGNER = Credential("GPCSIGNERKEY00000001", "signer-secret-value")


def backend(public_endpoint: str | None = "https://s3.gpu.example.com") -> S3Backend:
    return S3Backend(
        "http://minio.internal:9000", SERVICE.access_key, SERVICE.secret_key, "eu-west-1",
        public_endpoint=public_endpoint,
    )  # fmt: skip


def query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query))


def signature_holds(url: str, method: str, secret: str) -> bool:
    """Whether a presigned URL's SigV4 signature is the one `secret` gives (AWS's
    query-string authentication, computed here independently of minio)."""
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    given = dict(params)["X-Amz-Signature"]
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
        for k, v in sorted(params)
        if k != "X-Amz-Signature"
    )
    canonical = "\n".join(
        [
            method,
            parts.path,
            canonical_query,
            f"host:{parts.netloc}",
            "",
            "host",
            "UNSIGNED-PAYLOAD",
        ]
    )
    stamp = dict(params)["X-Amz-Date"]
    _, day, region, service, _ = dict(params)["X-Amz-Credential"].split("/")
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{secret}".encode()
    for step in (day, region, service, "aws4_request"):
        key = hmac.new(key, step.encode(), hashlib.sha256).digest()
    return hmac.compare_digest(hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), given)


def test_a_download_url_names_the_public_endpoint_the_bucket_and_the_key() -> None:
    url = backend().presign_get(SIGNER, "gpc-abc", "runs/7/model.safetensors", 600)
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("https", "s3.gpu.example.com")
    assert parts.path == "/gpc-abc/runs/7/model.safetensors"


def test_a_url_names_the_storages_key_and_region_never_the_services() -> None:
    url = backend().presign_put(SIGNER, "gpc-abc", "k", 60)
    credential = query(url)["X-Amz-Credential"].split("/")
    assert credential[0] == SIGNER.access_key
    assert credential[2:] == ["eu-west-1", "s3", "aws4_request"]
    assert SERVICE.access_key not in url


def test_a_url_lasts_as_long_as_asked() -> None:
    assert query(backend().presign_get(SIGNER, "gpc-b", "k", 600))["X-Amz-Expires"] == "600"
    assert query(backend().presign_put(SIGNER, "gpc-b", "k", 7 * 24 * 3600))["X-Amz-Expires"] == (
        "604800"
    )


def test_the_signature_holds_under_the_signers_secret_and_not_the_services() -> None:
    url = backend().presign_get(SIGNER, "gpc-abc", "data/a file+b.txt", 300)
    assert signature_holds(url, "GET", SIGNER.secret_key)
    assert not signature_holds(url, "GET", SERVICE.secret_key)
    # Signed for GET: the same URL does not hold as a PUT.
    assert not signature_holds(url, "PUT", SIGNER.secret_key)


def test_a_key_with_spaces_and_unicode_is_escaped_in_the_path_and_still_verifies() -> None:
    url = backend().presign_put(SIGNER, "gpc-abc", "jeux de données/é.csv", 300)
    assert urlsplit(url).path == "/gpc-abc/jeux%20de%20donn%C3%A9es/%C3%A9.csv"
    assert signature_holds(url, "PUT", SIGNER.secret_key)


def test_a_part_url_carries_its_upload_and_part_number_inside_the_signature() -> None:
    url = backend().presign_part(SIGNER, "gpc-abc", "big.bin", "upload-1", 7, 900)
    assert (query(url)["uploadId"], query(url)["partNumber"]) == ("upload-1", "7")
    assert signature_holds(url, "PUT", SIGNER.secret_key)
    # Another part number in the same URL breaks the signature.
    tampered = url.replace("partNumber=7", "partNumber=8")
    assert not signature_holds(tampered, "PUT", SIGNER.secret_key)


def test_without_a_public_endpoint_urls_name_the_services_own() -> None:
    own = backend(public_endpoint=None)
    assert own.public_endpoint == "http://minio.internal:9000"
    parts = urlsplit(own.presign_get(SIGNER, "gpc-b", "k", 60))
    assert (parts.scheme, parts.netloc) == ("http", "minio.internal:9000")


def test_each_key_pair_signs_with_its_own_client_made_once() -> None:
    s3 = backend()
    first = s3._signer(SIGNER)
    assert s3._signer(Credential(SIGNER.access_key, SIGNER.secret_key)) is first
    assert s3._signer(Credential("GPCOTHER", "other-secret")) is not first


def test_a_credentials_secret_is_left_out_of_its_repr() -> None:
    assert "signer-secret-value" not in repr(SIGNER)
    assert SIGNER.access_key in repr(SIGNER)
