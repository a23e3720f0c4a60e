"""Names several services derive from one id (gpucloud_libs.naming), beyond instance
hosts: tenant namespaces, service hosts, public origins, workload ids of jobs and
services, storage claims and variables, and which workload a pod belongs to."""

from __future__ import annotations

import re

import pytest

from gpucloud_libs.naming import (
    ID_PATTERN,
    INSTANCE_LABEL,
    JOB_LABEL,
    SERVICE_LABEL,
    TENANT_LABEL,
    instance_host,
    job_workload_id,
    parse_instance_host,
    parse_service_host,
    public_origin,
    service_host,
    service_workload_id,
    storage_claim_name,
    storage_env_prefix,
    tenant_namespace,
    workload_of,
)

DOMAIN = "gpucloud.example"
#: Kubernetes' DNS-1123 label: what a namespace name must be.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


# --- tenant namespaces -----------------------------------------------------------


@pytest.mark.parametrize("tenant_id", ["acme", "8888-acme", "a", "team-42-prod"])
def test_a_tenant_id_that_is_a_dns_word_names_its_namespace_readably(tenant_id: str) -> None:
    assert tenant_namespace(tenant_id) == f"gpc-{tenant_id}"


@pytest.mark.parametrize("tenant_id", ["Acme", "a_b", "a.b", "___", "-x-", "a" * 60, "a b"])
def test_an_odd_or_long_tenant_id_is_hashed_into_a_valid_namespace(tenant_id: str) -> None:
    name = tenant_namespace(tenant_id)
    assert DNS_LABEL.fullmatch(name), name
    assert name.startswith("gpc-")
    assert re.search(r"-[0-9a-f]{10}$", name), name
    assert name != f"gpc-{tenant_id}"


def test_ids_that_differ_only_in_their_odd_characters_get_different_namespaces() -> None:
    names = {tenant_namespace(t) for t in ("a_b", "a.b", "a b", "A-B", "a-b")}
    assert len(names) == 5


def test_the_longest_readable_tenant_id_fits_a_namespace() -> None:
    longest = "a" * 59  # 63 with the prefix
    assert tenant_namespace(longest) == f"gpc-{longest}"
    assert tenant_namespace(longest + "a") != f"gpc-{longest}a"
    assert len(tenant_namespace("a" * 500)) <= 63


def test_a_namespace_is_the_same_every_time() -> None:
    assert tenant_namespace("Team_One") == tenant_namespace("Team_One")


# --- service hosts ---------------------------------------------------------------


def test_a_service_host_reads_back_to_its_service_for_its_tenant_alone() -> None:
    host = service_host("chat", "acme", DOMAIN)
    assert host == f"chat--acme.{DOMAIN}"
    assert parse_service_host(host, "acme", DOMAIN) == "chat"
    assert parse_service_host(host, "8888-acme", DOMAIN) is None
    assert parse_service_host(host, "acme", "other.example") is None


def test_service_and_instance_hosts_never_read_as_each_other() -> None:
    instance = instance_host("nb", "acme", 8888, DOMAIN)
    service = service_host("nb", "acme", DOMAIN)
    assert parse_service_host(instance, "acme", DOMAIN) is None
    assert parse_instance_host(service, "acme", DOMAIN) is None


@pytest.mark.parametrize(
    "host",
    [f"--acme.{DOMAIN}", f"chat--acme.{DOMAIN}.evil.test", f"chat-acme.{DOMAIN}", "chat--acme", ""],
)
def test_hosts_that_are_not_service_hosts_are_refused(host: str) -> None:
    assert parse_service_host(host, "acme", DOMAIN) is None


def test_a_hosts_tenant_is_its_namespaces_label_even_for_a_hashed_id() -> None:
    """The tenant field is the namespace without its prefix, so a hashed id still
    makes one field with no separator in it."""
    host = service_host("chat", "Odd_Tenant", DOMAIN)
    label = tenant_namespace("Odd_Tenant").removeprefix("gpc-")
    assert host == f"chat--{label}.{DOMAIN}"
    assert parse_service_host(host, "Odd_Tenant", DOMAIN) == "chat"


# --- origins ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "port", "origin"),
    [
        ("https", 443, "https://h.example"),
        ("https", None, "https://h.example"),
        ("https", 8443, "https://h.example:8443"),
        ("http", 80, "http://h.example"),
        ("http", 443, "http://h.example:443"),  # another scheme's default is still said
        ("http", 8080, "http://h.example:8080"),
    ],
)
def test_an_origin_leaves_out_only_its_own_schemes_port(
    scheme: str, port: int | None, origin: str
) -> None:
    assert public_origin(scheme, "h.example", port) == origin


# --- workload ids and storage names ---------------------------------------------


def test_job_and_service_workload_ids_are_never_instance_ids() -> None:
    for workload in (job_workload_id("train"), service_workload_id("chat")):
        assert re.fullmatch(ID_PATTERN, workload) is None
    assert job_workload_id("train") == "job--train"
    assert service_workload_id("chat") == "svc--chat"
    assert job_workload_id("x") != service_workload_id("x")


def test_a_volume_storage_claim_is_named_after_the_storage() -> None:
    assert storage_claim_name("models") == "gpc-storage-models"


@pytest.mark.parametrize(
    ("storage_id", "prefix"),
    [("models", "STORAGE_MODELS_"), ("my-data-2", "STORAGE_MY_DATA_2_"), ("a", "STORAGE_A_")],
)
def test_an_object_storages_variables_are_prefixed_by_its_id_in_capitals(
    storage_id: str, prefix: str
) -> None:
    assert storage_env_prefix(storage_id) == prefix
    assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", prefix)


# --- whose pod is this -----------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "workload"),
    [
        ({TENANT_LABEL: "t", INSTANCE_LABEL: "nb-1"}, ("t", "nb-1")),
        ({TENANT_LABEL: "t", JOB_LABEL: "train"}, ("t", "job--train")),
        ({TENANT_LABEL: "t", SERVICE_LABEL: "chat"}, ("t", "svc--chat")),
        # An instance label wins: a job's or service's label is never read first.
        ({TENANT_LABEL: "t", INSTANCE_LABEL: "nb-1", JOB_LABEL: "train"}, ("t", "nb-1")),
        ({TENANT_LABEL: "t", JOB_LABEL: "train", SERVICE_LABEL: "chat"}, ("t", "job--train")),
    ],
)
def test_a_platform_pod_belongs_to_its_workload(
    labels: dict[str, str], workload: tuple[str, str]
) -> None:
    assert workload_of(labels) == workload


@pytest.mark.parametrize(
    "labels",
    [{}, {INSTANCE_LABEL: "nb-1"}, {TENANT_LABEL: "", INSTANCE_LABEL: "nb-1"},
     {TENANT_LABEL: "t"}, {TENANT_LABEL: "t", INSTANCE_LABEL: ""}, {"app": "dcgm"}],
)  # fmt: skip
def test_a_pod_without_a_tenant_and_a_workload_is_nobodys(labels: dict[str, str]) -> None:
    assert workload_of(labels) is None


def test_a_letter_outside_ascii_is_no_part_of_a_namespace() -> None:
    """DNS-1123 is ASCII: `é` is hashed away, not kept (str.isalnum would keep it)."""
    name = tenant_namespace("café")
    assert DNS_LABEL.fullmatch(name), name
    assert name.startswith("gpc-caf-")
