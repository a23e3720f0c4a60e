"""A registered kubeconfig is reduced to data before any loader sees it (review N2):
each field a loader would act on (run a command, read a file, use a proxy, skip TLS,
impersonate) is refused, naming it."""

from __future__ import annotations

from typing import Any

import pytest

from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.kubeconfigs import registered_kubeconfig

SERVER = "https://127.0.0.1:6443"


def kubeconfig(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> Any:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster or {"server": SERVER,
                                                           "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "u", "user": {"token": "t"} if user is None else user},
                  {"name": "other", "user": {"exec": {"command": "sh"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "x"}}],
        "preferences": {}, "extensions": [],
    }  # fmt: skip


def test_what_is_taken_is_the_current_contexts_data_alone() -> None:
    taken = registered_kubeconfig(kubeconfig())
    [user] = taken["users"]  # the other user, with its exec, is not carried over
    assert user["user"] == {"token": "t"}
    assert taken["clusters"][0]["cluster"] == {
        "server": SERVER,
        "certificate-authority-data": "Q0E=",
    }
    assert set(taken) == {"apiVersion", "kind", "current-context", "clusters", "users", "contexts"}
    certificate = {"client-certificate-data": "Qw==", "client-key-data": "Sw=="}
    assert registered_kubeconfig(kubeconfig(user=certificate))["users"][0]["user"] == certificate


@pytest.mark.parametrize(
    ("user", "says"),
    [
        ({"exec": {"command": "sh", "args": ["-c", "env >&2; exit 1"]}}, "exec is not taken: it runs a command"),
        ({"auth-provider": {"name": "gcp"}}, "auth-provider is not taken"),
        ({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, "tokenFile is not taken: it reads a file"),
        ({"client-certificate": "/etc/x.crt", "client-key": "/etc/x.key"}, "client-certificate is not taken"),
        ({"username": "admin", "password": "p"}, "password is not taken"),
        ({"token": "t", "as": "system:admin"}, "as is not taken"),
        ({}, "needs a token, or client-certificate-data and client-key-data"),
    ],
    ids=["exec", "auth-provider", "token-file", "certificate-files", "password", "impersonation", "nothing"],
)  # fmt: skip
def test_a_user_that_would_run_read_or_impersonate_is_refused(
    user: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationFailed, match=says):
        registered_kubeconfig(kubeconfig(user=user))


@pytest.mark.parametrize(
    ("cluster", "says"),
    [
        ({"server": SERVER, "insecure-skip-tls-verify": True}, "the API server's certificate must be checked"),
        ({"server": SERVER, "certificate-authority": "/etc/ca.crt"}, "certificate-authority is not taken"),
        ({"server": SERVER, "proxy-url": "http://127.0.0.1:3128"}, "proxy-url is not taken"),
        ({"server": "http://127.0.0.1:8080"}, "server must be an https:// URL"),
    ],
    ids=["insecure", "ca-file", "proxy", "plain-http"],
)  # fmt: skip
def test_a_cluster_that_would_read_files_or_weaken_tls_is_refused(
    cluster: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationFailed, match=says):
        registered_kubeconfig(kubeconfig(cluster=cluster))
