"""The gateway's table of forwarded routes: a path reaches one route of one service,
with the roles and scope it needs, and nothing else gets through."""

from __future__ import annotations

from collections import Counter

import pytest

from gpucloud_gateway.routes import FORWARDED, PLATFORM_ADMIN, match


def test_each_method_and_path_is_forwarded_once() -> None:
    twice = [key for key, count in Counter((r.method, r.path) for r in FORWARDED).items()
             if count > 1]  # fmt: skip
    assert twice == []


#: The scope family each service's routes are granted under (an API key's scopes).
SCOPES = {"instances": "instances", "storage": "storage", "metering": "billing",
          "monitoring": "monitoring"}  # fmt: skip


def test_every_route_names_its_roles_and_a_scope_of_its_service() -> None:
    for route in FORWARDED:
        assert route.roles, route.path
        assert route.path.startswith("/v1/"), route.path
        assert route.scope.split(":")[0] == SCOPES[route.service], route.path


@pytest.mark.parametrize(
    ("method", "path", "service", "roles"),
    [
        ("POST", "/v1/specs", "instances", PLATFORM_ADMIN),
        ("GET", "/v1/gpu-instances/i-1", "instances", None),
        ("GET", "/v1/gpu-instances/i-1/logs", "instances", None),
        ("PUT", "/v1/budget", "metering", None),
    ],
)
def test_a_path_reaches_the_route_of_its_template(
    method: str, path: str, service: str, roles: frozenset[str] | None
) -> None:
    found = match(method, path).route
    assert found is not None
    assert found.service == service
    if roles is not None:
        assert found.roles == roles


def test_a_followed_log_streams_and_a_read_does_not() -> None:
    logs = match("GET", "/v1/gpu-instances/i-1/logs").route
    read = match("GET", "/v1/gpu-instances/i-1").route
    assert logs is not None
    assert read is not None
    assert (logs.streams, read.streams) == (True, False)


def test_a_known_path_with_another_method_says_which_methods_it_takes() -> None:
    result = match("PATCH", "/v1/gpu-instances/i-1")
    assert result.route is None
    assert set(result.allowed) == {"GET", "DELETE"}


@pytest.mark.parametrize(
    "path",
    [
        "/v1/gpu-instances/i-1/../../internal",  # a template segment is one segment
        "/v1/gpu-instances/i-1/extra",
        "/gpu-instances/i-1",  # the services' own paths are not public
        "/v1/specs/",
        "/v1/unknown",
    ],
)
def test_a_path_no_template_names_is_not_forwarded(path: str) -> None:
    result = match("GET", path)
    assert (result.route, result.allowed) == (None, ())
