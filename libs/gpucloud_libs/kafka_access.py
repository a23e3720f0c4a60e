"""Who may do what on Kafka: one principal per service, and the step that applies it.

Each service signs in as its own SCRAM principal and may produce only the topics
it owns and read only the topics it consumes (with its own consumer group and
dead-letter topic). A tenant pod that reached the broker, or a stolen service
credential, can no longer forge another service's events: only the gateway may
write `gpucloud.tenants.v1`, so nobody else can delete or re-quota a tenant.

`apply` is the operator's step, run as the admin principal before the services
start (the local stack, the compose `kafka-access` service and the Helm hook Job
run it): it sets each service's SCRAM password, creates the topics and grants the
ACLs. It is idempotent. Run it as `python -m gpucloud_libs.kafka_access`.

aiokafka has no admin call for ACLs or SCRAM credentials that today's brokers
accept (Kafka 4 dropped the request versions it knows), so the two requests are
declared here from the Kafka protocol and sent through the admin client.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import sys
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from .kafka_connection import KafkaConnection
from .topics import (
    ALERTS,
    ALL_TOPICS,
    AUDIT,
    BILLING_ALERTS,
    CLUSTERS,
    INFERENCE_LIFECYCLE,
    INSTANCE_COMMANDS,
    INSTANCE_LIFECYCLE,
    JOB_LIFECYCLE,
    NODE_HEALTH,
    STORAGE_USAGE,
    TELEMETRY,
    TENANTS,
    USAGE,
    TopicSpec,
    dead_letter_topic,
    ensure_topics,
)

#: Kafka's minimum for SCRAM-SHA-256; every login pays it once per connection.
SCRAM_ITERATIONS = 4096


@dataclass(frozen=True)
class ServiceAccess:
    """What one service's principal may do. The principal and its consumer group are
    both `gpucloud-<service>`."""

    service: str
    produces: tuple[TopicSpec, ...]
    consumes: tuple[TopicSpec, ...] = ()

    @property
    def principal(self) -> str:
        return f"gpucloud-{self.service}"

    @property
    def group(self) -> str:
        return self.principal

    @property
    def dead_letters(self) -> TopicSpec | None:
        return dead_letter_topic(self.group) if self.consumes else None


ACCESS: dict[str, ServiceAccess] = {
    access.service: access
    for access in (
        ServiceAccess("gateway", produces=(TENANTS, AUDIT)),
        ServiceAccess(
            "instances",
            # Clusters: each registered cluster's nodes, for the monitoring service.
            produces=(INSTANCE_LIFECYCLE, JOB_LIFECYCLE, INFERENCE_LIFECYCLE, CLUSTERS),
            # Alerts: the stop-when-idle rules' firings stop instances.
            consumes=(TENANTS, INSTANCE_COMMANDS, NODE_HEALTH, ALERTS),
        ),
        ServiceAccess(
            "storage",
            produces=(STORAGE_USAGE,),
            # Ended instances, jobs and services: what they were given is revoked.
            consumes=(TENANTS, INSTANCE_LIFECYCLE, JOB_LIFECYCLE, INFERENCE_LIFECYCLE),
        ),
        ServiceAccess(
            "metering",
            # The stop command is metering's: a tenant over its budget is stopped.
            produces=(USAGE, BILLING_ALERTS, INSTANCE_COMMANDS),
            consumes=(
                INSTANCE_LIFECYCLE,
                JOB_LIFECYCLE,
                INFERENCE_LIFECYCLE,
                STORAGE_USAGE,
                TENANTS,
                NODE_HEALTH,
            ),
        ),
        ServiceAccess(
            "monitoring",
            # Release requests ride the telemetry topic, in order with the node's samples.
            produces=(NODE_HEALTH, ALERTS, TELEMETRY),
            # Tenants: a deleted tenant's alert rules go. Clusters: whose nodes'
            # telemetry is taken besides its own cluster's. Lifecycles: the project
            # each workload runs in, the boundary of its GPU metrics (decision 142).
            consumes=(
                TELEMETRY,
                TENANTS,
                CLUSTERS,
                INSTANCE_LIFECYCLE,
                JOB_LIFECYCLE,
                INFERENCE_LIFECYCLE,
            ),
        ),
        ServiceAccess("agent", produces=(TELEMETRY,)),
    )
}


def every_topic() -> list[TopicSpec]:
    """The platform's topics and each consumer group's dead-letter topic."""
    dead_letters = [access.dead_letters for access in ACCESS.values() if access.dead_letters]
    return [*ALL_TOPICS, *dead_letters]


# --- ACLs ----------------------------------------------------------------------------


class ResourceType(IntEnum):
    TOPIC = 2
    GROUP = 3


class Operation(IntEnum):
    READ = 3
    WRITE = 4
    DESCRIBE = 8


PATTERN_LITERAL = 3
PERMISSION_ALLOW = 3


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    principal: str
    operation: Operation


def acl_bindings(access: ServiceAccess) -> list[AclBinding]:
    """Literal names only: a new topic is nobody's until the model above says so."""
    principal = f"User:{access.principal}"
    bindings: list[AclBinding] = []

    def allow(kind: ResourceType, name: str, *operations: Operation) -> None:
        bindings.extend(AclBinding(kind, name, principal, op) for op in operations)

    for topic in access.produces:
        allow(ResourceType.TOPIC, topic.name, Operation.WRITE, Operation.DESCRIBE)
    for topic in access.consumes:
        allow(ResourceType.TOPIC, topic.name, Operation.READ, Operation.DESCRIBE)
    if access.dead_letters:
        allow(ResourceType.TOPIC, access.dead_letters.name, Operation.WRITE, Operation.DESCRIBE)
        allow(ResourceType.GROUP, access.group, Operation.READ, Operation.DESCRIBE)
    return bindings


# --- The two protocol requests (flexible versions, as Kafka 4 requires) ---------------


class CreateAclsResponseV3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 30
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            CompactArray(
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class CreateAclsRequestV3(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 30
    API_VERSION = 3
    RESPONSE_TYPE = CreateAclsResponseV3
    SCHEMA = Schema(
        (
            "creations",
            CompactArray(
                ("resource_type", Int8),
                ("resource_name", CompactString("utf-8")),
                ("resource_pattern_type", Int8),
                ("principal", CompactString("utf-8")),
                ("host", CompactString("utf-8")),
                ("operation", Int8),
                ("permission_type", Int8),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class CreateAcls(Request[CreateAclsRequestV3]):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 30

    def __init__(self, bindings: list[AclBinding]) -> None:
        self._bindings = bindings

    def build(self, request_struct_class: type[CreateAclsRequestV3]) -> CreateAclsRequestV3:
        creations: list[tuple[Any, ...]] = [
            (b.resource_type, b.resource_name, PATTERN_LITERAL, b.principal, "*", b.operation,
             PERMISSION_ALLOW, {})
            for b in self._bindings
        ]  # fmt: skip
        return request_struct_class(creations, {})


class AlterUserScramCredentialsResponseV0(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 51
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            CompactArray(
                ("user_name", CompactString("utf-8")),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class AlterUserScramCredentialsRequestV0(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 51
    API_VERSION = 0
    RESPONSE_TYPE = AlterUserScramCredentialsResponseV0
    SCHEMA = Schema(
        (
            "deletions",
            CompactArray(
                ("name", CompactString("utf-8")), ("mechanism", Int8), ("tags", TaggedFields)
            ),
        ),
        (
            "upsertions",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("mechanism", Int8),
                ("iterations", Int32),
                ("salt", CompactBytes),
                ("salted_password", CompactBytes),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


#: The protocol's number for SCRAM-SHA-256.
MECHANISM_SCRAM_SHA_256 = 1


class AlterUserScramCredentials(Request[AlterUserScramCredentialsRequestV0]):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 51

    def __init__(self, passwords: dict[str, str]) -> None:
        self._passwords = passwords

    def build(
        self, request_struct_class: type[AlterUserScramCredentialsRequestV0]
    ) -> AlterUserScramCredentialsRequestV0:
        upsertions: list[tuple[Any, ...]] = []
        for name, password in sorted(self._passwords.items()):
            # The broker stores only the salted password, computed here (RFC 5802 Hi()).
            salt = secrets.token_bytes(32)
            salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
            upsertions.append((name, MECHANISM_SCRAM_SHA_256, SCRAM_ITERATIONS, salt, salted, {}))
        return request_struct_class([], upsertions, {})


class KafkaAccessError(RuntimeError):
    """The broker refused part of the access step."""


async def apply(admin: KafkaConnection, passwords: dict[str, str]) -> dict[str, int]:
    """Set the services' SCRAM passwords (those given), create every topic and grant
    the ACLs. `admin` must be a super user. Returns what was applied, as counts."""
    client = AIOKafkaAdminClient(client_id="gpucloud-kafka-access", **admin.client_options())
    await client.start()
    try:
        unknown = set(passwords) - {access.principal for access in ACCESS.values()}
        if unknown:
            raise KafkaAccessError(f"no such service principal: {', '.join(sorted(unknown))}")
        if admin.username is not None and admin.mechanism == "PLAIN":
            # The super user signs in with PLAIN only to get here: from now on the
            # operator's clients use SCRAM too, and its password stops crossing the wire.
            passwords = {**passwords, admin.username: admin.password}
        if passwords:
            # Private aiokafka call: the public admin client has no method for this request.
            scram = await client._send_request(AlterUserScramCredentials(passwords))
            refused = [
                f"{user}: {message or code}" for user, code, message, _tags in scram.results if code
            ]
            if refused:
                raise KafkaAccessError("SCRAM credentials refused: " + "; ".join(refused))
        await ensure_topics(admin, every_topic())
        bindings = [b for access in ACCESS.values() for b in acl_bindings(access)]
        created = await client._send_request(CreateAcls(bindings))
        refused = [
            f"{binding.principal} {binding.operation.name} {binding.resource_name}: {message or code}"
            for binding, (code, message, _tags) in zip(
                bindings,
                created.results,
                strict=True,
            )
            if code
        ]
        if refused:
            raise KafkaAccessError("ACLs refused: " + "; ".join(refused))
        return {"users": len(passwords), "topics": len(every_topic()), "acls": len(bindings)}
    finally:
        await client.close()


def _passwords_from_env(env: dict[str, str]) -> dict[str, str]:
    return {
        access.principal: env[key]
        for access in ACCESS.values()
        if (key := f"GPUCLOUD_KAFKA_PASSWORD_{access.service.upper()}") in env
    }


def main() -> None:
    """Apply with the admin principal from GPUCLOUD_KAFKA_* and the services' passwords
    from GPUCLOUD_KAFKA_PASSWORD_<SERVICE> (a service without one keeps its password)."""
    if len(sys.argv) > 1:
        print(__doc__)
        print(main.__doc__)
        sys.exit(0 if sys.argv[1] in {"-h", "--help"} else 2)
    admin = KafkaConnection.from_env(os.environ)
    passwords = _passwords_from_env(dict(os.environ))
    try:
        applied = asyncio.run(apply(admin, passwords))
    except KafkaAccessError as error:
        print(f"kafka access: {error}", file=sys.stderr)
        sys.exit(1)
    print(
        f"kafka access: {applied['users']} SCRAM users, {applied['topics']} topics, {applied['acls']} ACLs"
    )


if __name__ == "__main__":
    main()
