"""Kubernetes pull secrets made of registry credentials."""

from __future__ import annotations

import base64
import json

from ..manifests import MANAGED, Manifest
from ..schemas import DOCKER_HUB

#: Image pull Secrets are named so; the admission policy lets the instances service
#: write no other Secret.
PULL_SECRET_PREFIX = "gpc-registry-"  # noqa: S105 - a name prefix, not a password


def pull_secret_name(credential_id: str) -> str:
    return f"{PULL_SECRET_PREFIX}{credential_id}"


def pull_secret(
    namespace_name: str, credential_id: str, registry: str, username: str, password: str
) -> Manifest:
    """A `kubernetes.io/dockerconfigjson` Secret with one registry's login."""
    login = base64.b64encode(f"{username}:{password}".encode()).decode()
    server = "https://index.docker.io/v1/" if registry == DOCKER_HUB else registry
    config = {"auths": {server: {"username": username, "password": password, "auth": login}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": pull_secret_name(credential_id),
            "namespace": namespace_name,
            "labels": {MANAGED: "true"},
        },
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }
