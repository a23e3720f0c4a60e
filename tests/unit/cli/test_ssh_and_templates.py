"""How the CLI reaches an instance and fills in a catalog template: the ssh tunnel's
ProxyCommand and host key alias, the port an instance's URL serves, and the instance
template made from a catalog template and what the user gave (ssh.py, instances.py).
The `ssh-config` block itself is printed after a request for the instance, so it is
left to the end-to-end tests."""

from __future__ import annotations

import sys
from typing import Any, cast

import click
import pytest

from gpucloud_cli.instances import first_public_port, from_catalog
from gpucloud_cli.session import Failure
from gpucloud_cli.ssh import host_alias, host_key_alias, proxy_command
from gpucloud_client.models import Instance

DEVBOX: dict[str, Any] = {
    "templateID": "ssh-devbox", "image": "linuxserver/openssh-server",
    "env": [{"name": "PUBLIC_KEY", "value": ""}, {"name": "TZ", "value": "UTC"}],
    "ports": [{"port": 2222, "isPublic": False}, {"port": 8888, "isPublic": True}],
    "servingPort": 8888, "readinessPath": "/api", "command": ["/init"], "args": [],
    "runAsUser": 1000,
}  # fmt: skip


def instance(states: list[str], urls: list[str] | None = None) -> Instance:
    return cast(Instance, {
        "instanceID": "i-3f2a", "history": [{"state": s, "at": ""} for s in states],
        "urls": urls or [],
    })  # fmt: skip


def given(**fields: Any) -> dict[str, Any]:
    return {"ports": [], "envs": [], **fields}


# --- ssh -------------------------------------------------------------------------------


def test_an_instance_is_known_to_ssh_by_its_own_alias_not_the_gateways() -> None:
    assert host_alias("i-3f2a") == "gpc-i-3f2a"
    assert host_key_alias(instance(["pending", "running"])) == "gpucloud-i-3f2a"


def test_an_instance_started_again_gets_a_host_key_alias_of_its_own() -> None:
    again = instance(["pending", "running", "stopped", "pending", "running"])
    assert host_key_alias(again) == "gpucloud-i-3f2a-2"
    thrice = instance(["pending", "failed", "pending", "stopped", "pending"])
    assert host_key_alias(thrice) == "gpucloud-i-3f2a-3"


def test_the_proxy_command_runs_this_interpreters_tunnel_naming_the_profile() -> None:
    assert proxy_command("prod", "i-3f2a", 2222) == [
        sys.executable, "-m", "gpucloud_cli.main", "--profile", "prod",
        "tunnel", "i-3f2a", "--port", "2222",
    ]  # fmt: skip
    assert proxy_command(None, "i-3f2a", 22) == [
        sys.executable, "-m", "gpucloud_cli.main", "tunnel", "i-3f2a", "--port", "22",
    ]  # fmt: skip


# --- an instance's URL -----------------------------------------------------------------


def test_an_instances_first_public_port_is_read_from_its_first_url() -> None:
    urls = ["https://i-3f2a--8888--acme.gpu.example.com/", "https://i-3f2a--6006--acme.x/"]
    assert first_public_port(instance([], urls)) == 8888


def test_urls_not_of_the_instance_form_are_passed_over() -> None:
    urls = ["https://chat.acme.gpu.example.com/", "http://i-3f2a--6006--acme.x/lab"]
    assert first_public_port(instance([], urls)) == 6006


def test_an_instance_without_a_public_url_asks_for_the_port() -> None:
    with pytest.raises(Failure, match="instance i-3f2a has no public port; pass --port"):
        first_public_port(instance([], ["https://i-3f2a--http--acme.x/"]))


# --- instance templates from the catalog -----------------------------------------------


def test_a_template_brings_its_ports_probe_env_command_and_user() -> None:
    made = from_catalog(DEVBOX, given(), public_key="ssh-ed25519 AAAA me@host")
    assert made == {
        "ports": [
            {"port": 2222, "isPublic": False},
            {"port": 8888, "isPublic": True, "isProbe": True, "baseUrl": "/api"},
        ],
        "envs": [
            {"name": "PUBLIC_KEY", "value": "ssh-ed25519 AAAA me@host"},
            {"name": "TZ", "value": "UTC"},
        ],
        "runAsUser": 1000,
        "command": ["/init"],  # no empty args
    }


def test_the_users_ports_env_and_command_replace_or_override_the_templates() -> None:
    made = from_catalog(
        DEVBOX,
        given(ports=[{"port": 9000, "isPublic": True}], cmd="sleep infinity",
              envs=[{"name": "TZ", "value": "CET"}, {"name": "PUBLIC_KEY", "value": "ssh-rsa B"}]),
        public_key=None,
    )  # fmt: skip
    assert made["ports"] == [{"port": 9000, "isPublic": True}]
    assert made["envs"] == [
        {"name": "PUBLIC_KEY", "value": "ssh-rsa B"}, {"name": "TZ", "value": "CET"},
    ]  # fmt: skip
    assert (made["cmd"], "command" in made, "args" in made) == ("sleep infinity", False, False)


def test_a_template_that_reads_a_public_key_must_be_given_one() -> None:
    with pytest.raises(click.UsageError, match="needs your SSH public key: --public-key FILE"):
        from_catalog(DEVBOX, given(), public_key=None)


def test_a_template_without_a_readiness_path_gets_no_probe() -> None:
    plain = {**DEVBOX, "env": [], "readinessPath": None, "command": [], "args": ["--x"]}
    made = from_catalog(plain, given(), public_key=None)
    assert made["ports"][1] == {"port": 8888, "isPublic": True}
    assert ("command" in made, made["args"]) == (False, ["--x"])
