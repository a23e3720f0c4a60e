"""Where an instance or inference-service host leads for one caller (instance_targets.py),
for the answers given before the instances service is asked: another tenant's host is
nobody's, a credential needs `instances:connect`, and a machine key of some inference
services reaches those services alone. What a recheck's refusal means, too."""

from __future__ import annotations

import pytest

from gpucloud_gateway.authorization import InsufficientScope
from gpucloud_gateway.instance_targets import InstanceTargets, RelayedProblem, no_longer_served
from gpucloud_gateway.schemas import Principal, Scope
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_gateway.upstream import Upstream
from gpucloud_libs.errors import DependencyUnavailable, Forbidden, NotFound
from gpucloud_libs.identity import IdentitySigner, Role, generate_key_pair

DOMAIN = "instances.example.com"
SETTINGS = GatewaySettings(instance_domain=DOMAIN)
CONNECT: list[Scope] = ["instances:read", "instances:connect"]


def targets() -> InstanceTargets:
    """Targets whose upstream is never dialled by the answers tested here."""
    upstream = Upstream(connect_timeout_s=0.1, read_timeout_s=0.1, egress=SETTINGS.egress)
    return InstanceTargets(
        SETTINGS, upstream, IdentitySigner("gateway", generate_key_pair()[0], setting="TEST")
    )


def caller(
    tenant_id: str | None = "t-a",
    *,
    scopes: list[Scope] | None = None,
    service_ids: list[str] | None = None,
    role: Role = "tenant-user",
) -> Principal:
    return Principal(
        subject="u-1", user_id="u-1", key_id="k-1", role=role, tenant_id=tenant_id,
        scopes=CONNECT if scopes is None else scopes, via="api_key", service_ids=service_ids,
    )  # fmt: skip


@pytest.mark.parametrize(
    "host",
    [
        f"chat--t-a.{DOMAIN}",
        f"chat--t-b.{DOMAIN}",
        f"nb-1--8888--t-a.{DOMAIN}",
        f"chat--t-a.{DOMAIN}.evil.example",
    ],
)
def test_a_platform_admin_reaches_no_service_host(host: str) -> None:
    admin = caller(None, role="platform-admin")
    assert targets().service_of(admin, host) is None


@pytest.mark.parametrize(
    "host",
    [
        f"chat--t-b.{DOMAIN}",  # another tenant's service
        f"chat--t-a-b.{DOMAIN}",
        f"nb-1--8888--t-a.{DOMAIN}",  # an instance host, not a service host
        "chat--t-a.other.example.com",
        f"chat--t-a.{DOMAIN}.evil.example",
        f"--t-a.{DOMAIN}",
        DOMAIN,
    ],
)
def test_a_host_that_is_not_one_of_the_callers_services_is_none(host: str) -> None:
    assert targets().service_of(caller(), host) is None


def test_a_members_own_service_host_names_the_service() -> None:
    assert targets().service_of(caller(), f"chat--t-a.{DOMAIN}") == "chat"


def test_a_credential_without_connect_is_refused_at_its_own_service() -> None:
    with pytest.raises(InsufficientScope, match="instances:connect"):
        targets().service_of(caller(scopes=["instances:read"]), f"chat--t-a.{DOMAIN}")


def test_a_service_key_reaches_its_own_services_alone() -> None:
    key = caller(scopes=["instances:connect"], service_ids=["chat", "embed"])
    assert targets().service_of(key, f"embed--t-a.{DOMAIN}") == "embed"
    with pytest.raises(Forbidden) as refused:
        targets().service_of(key, f"image--t-a.{DOMAIN}")
    assert refused.value.extensions == {"service_ids": ["chat", "embed"]}


def test_a_service_key_finds_nothing_at_another_tenants_service_of_the_same_name() -> None:
    key = caller(scopes=["instances:connect"], service_ids=["chat"])
    assert targets().service_of(key, f"chat--t-b.{DOMAIN}") is None


@pytest.mark.parametrize(
    "host",
    [
        f"nb-1--8888--t-b.{DOMAIN}",  # another tenant's instance
        f"nb-1--0--t-a.{DOMAIN}",
        f"nb-1--70000--t-a.{DOMAIN}",
        f"chat--t-a.{DOMAIN}",  # a service host
        "nb-1--8888--t-a.evil.example",
    ],
)
async def test_a_host_that_is_not_one_of_the_callers_instances_is_not_found(host: str) -> None:
    with pytest.raises(NotFound, match="no instance of yours answers at"):
        await targets().instance(caller(), host)


async def test_another_tenants_instance_is_not_found_even_without_connect() -> None:
    """The scope is checked after the host: a refusal never says a host exists."""
    with pytest.raises(NotFound):
        await targets().instance(caller(scopes=[]), f"nb-1--8888--t-b.{DOMAIN}")


async def test_a_platform_admin_opens_no_instance() -> None:
    with pytest.raises(NotFound):
        await targets().instance(caller(None, role="platform-admin"), f"nb-1--8888--t-a.{DOMAIN}")


async def test_a_service_key_opens_no_instance_of_its_tenant() -> None:
    key = caller(scopes=["instances:connect"], service_ids=["chat"])
    with pytest.raises(NotFound):
        await targets().instance(key, f"nb-1--8888--t-a.{DOMAIN}")


async def test_an_own_instance_needs_the_connect_scope() -> None:
    with pytest.raises(InsufficientScope):
        await targets().instance(caller(scopes=["instances:read"]), f"nb-1--8888--t-a.{DOMAIN}")


@pytest.mark.parametrize(("status", "meaning"), [(404, NotFound), (409, NotFound), (403, NotFound),
                                                  (500, DependencyUnavailable),
                                                  (503, DependencyUnavailable)])  # fmt: skip
def test_a_recheck_refused_is_gone_and_one_unanswered_is_an_outage(
    status: int, meaning: type[Exception]
) -> None:
    error = no_longer_served(RelayedProblem(status, [], b"{}"), 8888)
    assert type(error) is meaning
    if meaning is NotFound:
        assert error.detail == "the instance no longer serves port 8888"


def test_a_relayed_problem_is_answered_as_the_instances_service_gave_it() -> None:
    problem = RelayedProblem(
        409, [("Content-Type", "application/problem+json")], b'{"code":"instance_stopped"}'
    )
    assert problem.response.status_code == 409
    assert problem.response.body == b'{"code":"instance_stopped"}'
    assert (b"content-type", b"application/problem+json") in problem.response.raw_headers
