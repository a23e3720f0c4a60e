"""The compose file's `jobset-setup` step: JobSet's CRD and webhooks on the kwok
cluster, and the controller's configuration and serving certificate in a volume the
`jobset` container reads. The native stack does the same in `_prepare_jobset`.

    python -m gpucloud_stack.compose_jobset --server http://kwok:8080 --out /jobset

Idempotent: a certificate already made is kept, and every object is server-side
applied. Runs in the instances image, which has `cryptography`; the CRD comes from
JobSet's repository at the pinned version, as the native stack's Go module has it.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import urllib.request
from pathlib import Path

from . import jobset, layout

CRD_URL = (
    f"https://raw.githubusercontent.com/kubernetes-sigs/jobset/{layout.JOBSET_VERSION}/"
    f"{jobset.CRD_FILE}"
)
WEBHOOK_PORT = 9443
HEALTH = ":8081"


def issue_certificate(out: Path, host: str) -> bytes:
    """A CA and a serving certificate for `host` in `out`; the CA's PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    certs = out / "certs"
    if (certs / "tls.crt").exists():
        return (out / "ca.crt").read_bytes()
    certs.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpucloud-jobset-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    (certs / "tls.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (certs / "tls.key").chmod(0o600)
    (certs / "tls.crt").write_bytes(serving.public_bytes(pem))
    (out / "ca.crt").write_bytes(ca.public_bytes(pem))
    return ca.public_bytes(pem)


def objects(ca_pem: bytes, host: str, crd: str) -> list[tuple[str, str]]:
    """(API path, body) of what the cluster gets: the CRD, then the webhooks."""
    base_url = f"https://{host}:{WEBHOOK_PORT}"
    ca_bundle = base64.b64encode(ca_pem).decode()
    return [
        (jobset.CRD_PATH, crd),
        *(
            (path, json.dumps(manifest))
            for path, manifest in jobset.webhook_configurations(base_url, ca_bundle)
        ),
    ]


def apply(server: str, path: str, body: str) -> None:
    request = urllib.request.Request(
        f"{server}{path}?fieldManager=gpucloud-compose&force=true",
        data=body.encode(),
        method="PATCH",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gpucloud_stack.compose_jobset")
    parser.add_argument("--server", default="http://kwok:8080", help="the kwok API server")
    parser.add_argument("--host", default="jobset", help="the controller's compose name")
    parser.add_argument("--out", type=Path, default=Path("/jobset"))
    parser.add_argument("--owner", type=int, help="the uid the controller runs as, to own its key")
    args = parser.parse_args()
    ca_pem = issue_certificate(args.out, args.host)
    if args.owner is not None:
        for path in (args.out / "certs", *(args.out / "certs").iterdir()):
            os.chown(path, args.owner, args.owner)
    (args.out / "config.yaml").write_text(
        jobset.controller_config(
            webhook_host="", webhook_port=WEBHOOK_PORT, certs=str(args.out / "certs"),
            health=HEALTH,
        )
    )  # fmt: skip
    with urllib.request.urlopen(CRD_URL, timeout=60) as response:
        crd = response.read().decode()
    for path, body in objects(ca_pem, args.host, crd):
        apply(args.server, path, body)
        print(f"applied {path}")


if __name__ == "__main__":
    main()
