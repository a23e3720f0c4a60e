"""A tenant's registry logins (registry/schemas.py) and the image pull Secret each becomes
in the tenant's namespace (registry/manifests.py): what the kubelet is handed, under
which name, and what a request to store one may hold."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from pydantic import ValidationError

from gpucloud_instances.registry.manifests import (
    PULL_SECRET_PREFIX,
    pull_secret,
    pull_secret_name,
)
from gpucloud_instances.registry.schemas import RegistryCredentialCreate
from gpucloud_instances.schemas import image_registry

LOGIN = {"credentialID": "ngc", "registry": "nvcr.io", "username": "$oauthtoken", "password": "k"}


def docker_config(secret: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    return config


def test_a_pull_secret_holds_one_registrys_login_as_the_kubelet_reads_it() -> None:
    secret = pull_secret("gpc-acme", "ngc", "nvcr.io", "$oauthtoken", "nvapi-s3cret")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["metadata"]["name"] == "gpc-registry-ngc"
    assert secret["metadata"]["namespace"] == "gpc-acme"
    assert docker_config(secret) == {
        "auths": {"nvcr.io": {
            "username": "$oauthtoken", "password": "nvapi-s3cret",
            "auth": base64.b64encode(b"$oauthtoken:nvapi-s3cret").decode(),
        }}
    }  # fmt: skip


def test_a_docker_hub_login_is_written_for_the_hubs_own_server_name() -> None:
    """The kubelet looks Docker Hub's short names (`busybox`) up under the index's URL."""
    secret = pull_secret("gpc-acme", "hub", image_registry("library/ubuntu:24.04"), "me", "pw")
    assert list(docker_config(secret)["auths"]) == ["https://index.docker.io/v1/"]


def test_a_registry_with_a_port_keeps_it_in_the_server_name() -> None:
    secret = pull_secret("gpc-acme", "own", "registry.example.com:5000", "me", "pw")
    assert list(docker_config(secret)["auths"]) == ["registry.example.com:5000"]


def test_pull_secrets_carry_the_prefix_the_admission_policy_lets_the_service_write() -> None:
    assert pull_secret_name("r-1") == f"{PULL_SECRET_PREFIX}r-1" == "gpc-registry-r-1"
    secret = pull_secret("gpc-acme", "r-1", "ghcr.io", "me", "pw")
    assert secret["metadata"]["labels"] == {"gpucloud.io/managed": "true"}


def test_a_stored_logins_password_never_shows_again() -> None:
    body = RegistryCredentialCreate.model_validate({**LOGIN, "password": "nvapi-s3cret"})
    assert body.password.get_secret_value() == "nvapi-s3cret"
    assert "nvapi-s3cret" not in repr(body)
    assert "nvapi-s3cret" not in body.model_dump_json()


@pytest.mark.parametrize(
    "registry", ["nvcr.io", "ghcr.io", "registry.example.com:5000", "docker.io"]
)
def test_a_login_names_its_registry_as_an_image_reference_does(registry: str) -> None:
    assert (
        RegistryCredentialCreate.model_validate({**LOGIN, "registry": registry}).registry
        == registry
    )


@pytest.mark.parametrize(
    "fields",
    [{"registry": "https://nvcr.io"}, {"registry": "NVCR.io"}, {"registry": "nvcr.io/nvidia"},
     {"registry": "nvcr.io:123456"}, {"username": ""}, {"password": ""},
     {"credentialID": "NGC"}, {"registry": ""}],
)  # fmt: skip
def test_a_malformed_login_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RegistryCredentialCreate.model_validate({**LOGIN, **fields})
