"""Credentials generated once per data directory, kept in a 0600 file beside the data.

Nothing here is a constant in the code: a fresh data directory gets fresh secrets,
and `reset` throws them away with the data.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from . import layout

#: The Kafka principals with a SCRAM password of their own (gpucloud_libs.kafka_access).
KAFKA_SERVICES = ("gateway", "instances", "storage", "metering", "monitoring", "agent")


def _token(size: int = 32) -> str:
    return secrets.token_urlsafe(size)


def _fernet_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


#: The services that talk to the Kubernetes API (kube_access.KUBE_SERVICES).
KUBE_SERVICES = ("instances", "storage", "monitoring", "agent")


#: The services that sign identities (gpucloud_libs.identity): each has an Ed25519 pair.
IDENTITY_SIGNERS = ("gateway", "instances")


def _ed25519_pair() -> dict[str, str]:
    """{"private", "public"}: each the base64url of its 32 raw bytes, made by openssl
    (the stack needs no Python packages)."""

    def openssl(*args: str, given: bytes = b"") -> bytes:
        return subprocess.run(
            ["openssl", *args], input=given, capture_output=True, check=True
        ).stdout

    pkcs8 = openssl("genpkey", "-algorithm", "ed25519", "-outform", "DER")
    spki = openssl("pkey", "-inform", "DER", "-pubout", "-outform", "DER", given=pkcs8)

    def raw(der: bytes) -> str:  # both DER forms end with the 32 key bytes
        return base64.urlsafe_b64encode(der[-32:]).rstrip(b"=").decode()

    return {"private": raw(pkcs8), "public": raw(spki)}


@dataclass(frozen=True)
class Secrets:
    # Every field has a generator, so a data directory from an older version gets
    # the secrets that were added since, and keeps the ones it had.
    kube_admin_token: str = field(default_factory=_token)
    #: A Kubernetes token per service (kube_access.py): none of them is the admin.
    kube_tokens: dict[str, str] = field(
        default_factory=lambda: {service: _token() for service in KUBE_SERVICES}
    )
    minio_root_user: str = "gpucloud-root"
    minio_root_password: str = field(default_factory=_token)
    minio_storage_password: str = field(default_factory=_token)
    #: Seals the storage service's per-storage presigning secrets at rest (Fernet).
    storage_secrets_key: str = field(default_factory=_fernet_key)
    postgres_password: str = field(default_factory=_token)
    #: The gateway's session-token key: the gateway's alone.
    session_secret: str = field(default_factory=lambda: _token(48))
    identity_keys: dict[str, dict[str, str]] = field(
        default_factory=lambda: {signer: _ed25519_pair() for signer in IDENTITY_SIGNERS}
    )
    bootstrap_admin_key: str = field(default_factory=lambda: BOOTSTRAP_KEY_PREFIX + _token())
    #: Seals webhook signing secrets at rest (a Fernet key): the monitoring service's.
    webhook_secrets_key: str = field(default_factory=_fernet_key)
    #: Seals tenants' container registry passwords at rest: the instances service's.
    registry_secrets_key: str = field(default_factory=_fernet_key)
    #: Seals registered clusters' kubeconfigs at rest: the instances service's.
    cluster_secrets_key: str = field(default_factory=_fernet_key)
    #: Bearer token of the GPU simulator's fault API (the operator's).
    simulator_token: str = field(default_factory=_token)
    #: Derives each node's telemetry key: the monitoring service's, and the GPU
    #: simulator's, which stands in for every simulated node's agent.
    telemetry_secret: str = field(default_factory=lambda: _token(48))
    #: The broker's super user, for the operator's Kafka access step only.
    kafka_admin_password: str = field(default_factory=_token)
    kafka_passwords: dict[str, str] = field(
        default_factory=lambda: {service: _token() for service in KAFKA_SERVICES}
    )


def _path() -> Path:
    return layout.etc_dir() / "secrets.json"


#: API keys read `gpc_<key id>_<secret>`; the bootstrap admin's key id is fixed.
BOOTSTRAP_KEY_PREFIX = "gpc_bootstrap_"


def _write(path: Path, values: Secrets, *, exclusive: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(values), out, indent=2)


def load_or_create() -> Secrets:
    path = _path()
    if path.exists():
        stored = json.loads(path.read_text())
        known = {f.name for f in fields(Secrets)}
        loaded = Secrets(**{key: value for key, value in stored.items() if key in known})
        if not loaded.bootstrap_admin_key.startswith(BOOTSTRAP_KEY_PREFIX):
            # A data directory from before key ids: issue a key in today's format.
            loaded = replace(loaded, bootstrap_admin_key=BOOTSTRAP_KEY_PREFIX + _token())
        missing = set(KAFKA_SERVICES) - set(loaded.kafka_passwords)
        if missing:
            loaded = replace(
                loaded, kafka_passwords={**loaded.kafka_passwords, **{m: _token() for m in missing}}
            )
        if asdict(loaded) != stored:
            _write(path, loaded, exclusive=False)
        return loaded
    created = Secrets()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    _write(path, created, exclusive=True)
    return created


def ensure_kube_pki() -> Path:
    """A private CA, the API server's serving certificate and the service-account key pair."""
    pki = layout.etc_dir() / "pki"
    if (pki / "apiserver.crt").exists():
        return pki
    pki.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

    openssl("genrsa", "-out", "ca.key", "2048")
    openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "3650", "-subj", "/CN=gpucloud-local-ca",
            "-out", "ca.crt")  # fmt: skip
    openssl("genrsa", "-out", "apiserver.key", "2048")
    (pki / "apiserver.ext").write_text(
        "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl(
        "req",
        "-new",
        "-key",
        "apiserver.key",
        "-subj",
        "/CN=kube-apiserver",
        "-out",
        "apiserver.csr",
    )
    openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "3650", "-extfile", "apiserver.ext", "-out", "apiserver.crt")  # fmt: skip
    openssl("genrsa", "-out", "sa.key", "2048")
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    for key in pki.glob("*.key"):
        key.chmod(0o600)
    return pki


def issue_serving_cert(pki: Path, directory: Path, name: str) -> None:
    """`directory`/tls.crt and tls.key: a serving certificate for this machine's loopback
    address, from the stack's CA (for a webhook the API server calls); made once."""
    if (directory / "tls.crt").exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    (directory / "tls.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    openssl("genrsa", "-out", "tls.key", "2048")
    openssl("req", "-new", "-key", "tls.key", "-subj", f"/CN={name}", "-out", "tls.csr")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", str(pki / "ca.crt"), "-CAkey",
            str(pki / "ca.key"), "-CAcreateserial", "-CAserial", "tls.srl", "-days", "3650",
            "-extfile", "tls.ext", "-out", "tls.crt")  # fmt: skip
    (directory / "tls.key").chmod(0o600)
