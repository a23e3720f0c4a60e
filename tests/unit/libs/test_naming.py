"""Instance hosts read one way only: no tenant can own a host that names another
tenant's instance, whatever ids the two were given; and storage Secrets of two
storage and instance pairs never collide."""

from __future__ import annotations

import itertools
import random
import re

from gpucloud_libs.naming import (
    DEFAULT_PROJECT,
    ID_PATTERN,
    instance_host,
    parse_instance_host,
    project_namespace,
    storage_secret_name,
    tenant_namespace,
)

DOMAIN = "instances.gpucloud.local"


def test_the_digits_and_dash_tenant_cannot_shadow_another() -> None:
    """Under `<instance>-<port>-<tenant>`, tenant `8888-acme`'s instance `a-80` had the
    host of tenant `acme`'s instance `a-80-8888`... on port 8888."""
    attacker, victim = "8888-acme", "acme"
    for instance, port in [("a-80", 8888), ("a", 80), ("nb-1", 8888)]:
        host = instance_host(instance, attacker, port, DOMAIN)
        assert parse_instance_host(host, attacker, DOMAIN) == (instance, port)
        assert parse_instance_host(host, victim, DOMAIN) is None


def test_every_host_names_one_instance_of_one_tenant() -> None:
    rng = random.Random(7)
    words = ["a", "b1", "8888", "80", "acme", "0"]

    def an_id() -> str:
        return "-".join(rng.choice(words) for _ in range(rng.randint(1, 4)))

    tenants = {an_id() for _ in range(40)}
    seen: dict[str, tuple[str, str, int]] = {}
    for tenant in tenants:
        for _ in range(40):
            instance, port = an_id(), rng.choice([80, 8888, 1, 65535])
            assert re.fullmatch(ID_PATTERN, instance)
            assert re.fullmatch(ID_PATTERN, tenant)
            host = instance_host(instance, tenant, port, DOMAIN)
            assert seen.setdefault(host, (tenant, instance, port)) == (tenant, instance, port)
            for other in tenants:
                parsed = parse_instance_host(host, other, DOMAIN)
                assert parsed == ((instance, port) if other == tenant else None), (host, other)


def test_hosts_that_are_not_instance_hosts_are_refused() -> None:
    for host in [
        f"nb--8888--acme.{DOMAIN}.evil.test",
        f"nb--8888--acme--x.{DOMAIN}",
        f"nb-8888-acme.{DOMAIN}",
        f"--8888--acme.{DOMAIN}",
        f"nb--0--acme.{DOMAIN}",
        f"nb--65536--acme.{DOMAIN}",
        f"nb--http--acme.{DOMAIN}",
    ]:
        assert parse_instance_host(host, "acme", DOMAIN) is None, host


def test_ids_with_the_separator_are_not_ids() -> None:
    for bad, good in itertools.product(
        ["a--b", "-a", "a-", "A", "a_b"], ["a-b", "a1", "8888-acme"]
    ):
        assert not re.fullmatch(ID_PATTERN, bad)
        assert re.fullmatch(ID_PATTERN, good)


def test_two_storage_and_instance_pairs_never_share_a_secret_name() -> None:
    """Both ids may hold dashes; the pair's digest keeps their Secrets apart (L8)."""
    assert storage_secret_name("a", "b-c") != storage_secret_name("a-b", "c")
    assert storage_secret_name("models", "job--train") != storage_secret_name("models-job", "train")
    names = {
        storage_secret_name(storage, instance)
        for storage in ("a", "a-b", "a-b-c", "models")
        for instance in ("c", "b-c", "job--x", "svc--y")
    }
    assert len(names) == 16
    assert all(len(name) <= 253 for name in names)


def test_a_projects_namespace_is_never_a_tenants_nor_another_projects() -> None:
    """`acme`'s project `vision` and tenant `acme-vision` must not share a namespace;
    `default`'s is the tenant's own; every name is a DNS label."""
    assert project_namespace("acme", DEFAULT_PROJECT) == tenant_namespace("acme") == "gpc-acme"
    assert project_namespace("acme", "vision") == "gpc-acme--vision"
    assert project_namespace("acme", "vision") != tenant_namespace("acme-vision")
    assert project_namespace("acme-vision", "x") != project_namespace("acme", "vision-x")
    longest = project_namespace("t" * 32, "p" * 20)
    assert len(longest) <= 63
    assert longest.endswith("--" + "p" * 20)
    odd = project_namespace("Acme_Corp-" + "x" * 60, "vision")
    assert len(odd) <= 63
    assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", odd)
