"""The Kafka access table (gpucloud_libs.kafka_access) as the brokers' ACLs are made
of it: one writer for each billing input and command, every topic a service reads
written by someone, a consumer group and dead-letter topic for each consumer alone,
and the operator's requests built as Kafka expects them."""

from __future__ import annotations

import hashlib
from collections import defaultdict

from gpucloud_libs.kafka_access import (
    ACCESS,
    MECHANISM_SCRAM_SHA_256,
    PATTERN_LITERAL,
    PERMISSION_ALLOW,
    SCRAM_ITERATIONS,
    AclBinding,
    AlterUserScramCredentials,
    AlterUserScramCredentialsRequestV0,
    CreateAcls,
    CreateAclsRequestV3,
    Operation,
    ResourceType,
    _passwords_from_env,
    acl_bindings,
    every_topic,
)
from gpucloud_libs.topics import ALL_TOPICS


def writers() -> dict[str, set[str]]:
    """Topic name -> the services that may write it."""
    found: dict[str, set[str]] = defaultdict(set)
    for access in ACCESS.values():
        for binding in acl_bindings(access):
            if binding.resource_type is ResourceType.TOPIC and binding.operation is Operation.WRITE:
                found[binding.resource_name].add(access.service)
    return found


def test_each_platform_topic_has_the_writers_the_model_names_and_no_other() -> None:
    assert {topic.name: writers()[topic.name] for topic in ALL_TOPICS} == {
        "gpucloud.tenants.v1": {"gateway"},
        "gpucloud.audit.v1": {"gateway"},
        "gpucloud.instances.lifecycle.v1": {"instances"},
        "gpucloud.jobs.lifecycle.v1": {"instances"},
        "gpucloud.inference.lifecycle.v1": {"instances"},
        "gpucloud.storage.usage.v1": {"storage"},
        # Only metering's budget stop may ask to stop a tenant's instances.
        "gpucloud.instances.commands.v1": {"metering"},
        "gpucloud.usage.v1": {"metering"},
        "gpucloud.billing.alerts.v1": {"metering"},
        # Only monitoring may quarantine a node (and so credit its GPU time).
        "gpucloud.nodes.health.v1": {"monitoring"},
        "gpucloud.alerts.v1": {"monitoring"},
        "gpucloud.telemetry.v1": {"monitoring", "agent"},
        "gpucloud.clusters.v1": {"instances"},
    }


def test_every_topic_a_service_reads_is_written_by_another() -> None:
    written = writers()
    for access in ACCESS.values():
        for topic in access.consumes:
            assert written[topic.name] - {access.service}, (access.service, topic.name)


def test_each_principal_and_group_is_named_after_its_service() -> None:
    metering = ACCESS["metering"]
    assert (metering.principal, metering.group) == ("gpucloud-metering", "gpucloud-metering")
    assert {binding.principal for binding in acl_bindings(metering)} == {"User:gpucloud-metering"}


def test_only_consumers_get_a_group_and_a_dead_letter_topic_of_their_own() -> None:
    for access in ACCESS.values():
        bindings = acl_bindings(access)
        groups = {b.resource_name for b in bindings if b.resource_type is ResourceType.GROUP}
        if access.consumes:
            assert access.dead_letters is not None
            assert access.dead_letters.name == f"gpucloud.dlq.{access.principal}"
            assert groups == {access.group}
        else:
            assert (access.dead_letters, groups) == (None, set())
    assert ACCESS["agent"].dead_letters is None
    assert ACCESS["gateway"].dead_letters is None


def test_a_service_may_read_only_what_it_consumes() -> None:
    for access in ACCESS.values():
        read = {
            b.resource_name
            for b in acl_bindings(access)
            if b.resource_type is ResourceType.TOPIC and b.operation is Operation.READ
        }
        assert read == {topic.name for topic in access.consumes}, access.service


def test_every_topic_allowed_is_described_too() -> None:
    """A client that may not describe a topic cannot find it, even to write it."""
    for access in ACCESS.values():
        bindings = acl_bindings(access)
        used = {
            (b.resource_type, b.resource_name)
            for b in bindings
            if b.operation is not Operation.DESCRIBE
        }
        described = {
            (b.resource_type, b.resource_name)
            for b in bindings
            if b.operation is Operation.DESCRIBE
        }
        assert used == described, access.service


def test_the_operator_creates_every_topic_and_every_dead_letter_topic_once() -> None:
    names = [topic.name for topic in every_topic()]
    assert len(names) == len(set(names))
    assert set(names) == {t.name for t in ALL_TOPICS} | {
        f"gpucloud.dlq.gpucloud-{service}"
        for service in ("instances", "storage", "metering", "monitoring")
    }


def test_the_acl_request_allows_each_binding_on_its_literal_name_from_any_host() -> None:
    binding = AclBinding(
        ResourceType.TOPIC, "gpucloud.usage.v1", "User:gpucloud-x", Operation.WRITE
    )
    request = CreateAcls([binding]).build(CreateAclsRequestV3)
    assert request.creations == [
        (ResourceType.TOPIC, "gpucloud.usage.v1", PATTERN_LITERAL, "User:gpucloud-x", "*",
         Operation.WRITE, PERMISSION_ALLOW, {}),
    ]  # fmt: skip
    assert request.encode()  # the schema encodes what was built


def test_the_scram_request_sends_salted_passwords_never_the_passwords() -> None:
    request = AlterUserScramCredentials({"gpucloud-b": "pw-b", "gpucloud-a": "pw-a"}).build(
        AlterUserScramCredentialsRequestV0
    )
    assert request.deletions == []
    assert [u[0] for u in request.upsertions] == ["gpucloud-a", "gpucloud-b"]
    for (name, mechanism, iterations, salt, salted, tags), password in zip(
        request.upsertions, ["pw-a", "pw-b"], strict=True
    ):
        assert (mechanism, iterations, tags) == (MECHANISM_SCRAM_SHA_256, SCRAM_ITERATIONS, {})
        assert len(salt) == 32
        assert salted == hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 4096), name
        assert password.encode() not in salted
    first, second = request.upsertions
    assert first[3] != second[3]  # a salt each


def test_service_passwords_are_read_from_their_own_variables_only() -> None:
    env = {
        "GPUCLOUD_KAFKA_PASSWORD_GATEWAY": "g",
        "GPUCLOUD_KAFKA_PASSWORD_METERING": "m",
        "GPUCLOUD_KAFKA_PASSWORD_STRANGER": "x",  # no such service
        "GPUCLOUD_KAFKA_PASSWORD_agent": "a",  # the name is upper case
    }
    assert _passwords_from_env(env) == {"gpucloud-gateway": "g", "gpucloud-metering": "m"}
    assert _passwords_from_env({}) == {}
