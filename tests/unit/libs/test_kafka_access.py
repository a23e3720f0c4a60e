"""The Kafka access table: who may write what, as the brokers' ACLs are made of it."""

from __future__ import annotations

from gpucloud_libs.kafka_access import ACCESS, Operation, ResourceType, acl_bindings
from gpucloud_libs.topics import TENANTS


def test_only_the_gateway_may_write_the_tenants_topic() -> None:
    writers = {
        access.service
        for access in ACCESS.values()
        for binding in acl_bindings(access)
        if binding.resource_type is ResourceType.TOPIC
        and binding.resource_name == TENANTS.name
        and binding.operation is Operation.WRITE
    }
    assert writers == {"gateway"}


def test_no_principal_may_write_what_it_only_consumes() -> None:
    for access in ACCESS.values():
        written = {
            binding.resource_name
            for binding in acl_bindings(access)
            if binding.operation is Operation.WRITE
        }
        owned = {topic.name for topic in access.produces}
        dead_letters = {access.dead_letters.name} if access.dead_letters else set()
        assert written == owned | dead_letters, access.service
