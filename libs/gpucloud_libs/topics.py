"""Every Kafka topic the platform uses, in one place, and the helper that creates them."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from .events import (
    AlertStateChanged,
    AuditRecorded,
    BudgetThresholdCrossed,
    ClusterNodes,
    EventData,
    InferenceServiceDeleted,
    InstanceStateChanged,
    JobRunStateChanged,
    JobStateChanged,
    NodeHealthChanged,
    NodeInventory,
    NodeQuarantineRequested,
    NodeReleaseRequested,
    ProjectBudgetReached,
    ReplicaStateChanged,
    StopTenantInstancesRequested,
    StorageUsageSampled,
    TelemetryBatch,
    TenantDeleted,
    TenantUpserted,
    UsageRecorded,
    UserAccessEnded,
    UserSpendLimitReached,
)
from .kafka_connection import KafkaConnection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 3
    #: Milliseconds; -1 keeps records forever (billing inputs are replayable).
    retention_ms: int = 7 * 24 * 3600 * 1000
    #: The event types that belong on the topic. Consumers dead-letter any other
    #: (libs/kafka.py), so no handler checks; empty means any type.
    carries: tuple[type[EventData], ...] = ()

    def belongs(self, data: EventData) -> bool:
        return not self.carries or isinstance(data, self.carries)


TENANTS = TopicSpec(
    "gpucloud.tenants.v1", retention_ms=-1,
    carries=(TenantUpserted, TenantDeleted, UserAccessEnded),
)  # fmt: skip
INSTANCE_LIFECYCLE = TopicSpec(
    "gpucloud.instances.lifecycle.v1",
    partitions=6,
    retention_ms=-1,
    carries=(InstanceStateChanged,),
)
JOB_LIFECYCLE = TopicSpec(
    "gpucloud.jobs.lifecycle.v1",
    partitions=6,
    retention_ms=-1,
    carries=(JobStateChanged, JobRunStateChanged),
)
INFERENCE_LIFECYCLE = TopicSpec(
    "gpucloud.inference.lifecycle.v1",
    partitions=6,
    retention_ms=-1,
    carries=(ReplicaStateChanged, InferenceServiceDeleted),
)
INSTANCE_COMMANDS = TopicSpec(
    "gpucloud.instances.commands.v1",
    carries=(StopTenantInstancesRequested, UserSpendLimitReached, ProjectBudgetReached),
)
STORAGE_USAGE = TopicSpec(
    "gpucloud.storage.usage.v1", retention_ms=-1, carries=(StorageUsageSampled,)
)
TELEMETRY = TopicSpec(
    "gpucloud.telemetry.v1",
    partitions=6,
    retention_ms=24 * 3600 * 1000,
    carries=(TelemetryBatch, NodeInventory, NodeReleaseRequested, NodeQuarantineRequested),
)
#: Each registered cluster's nodes (instances -> monitoring), kept: the last word on
#: a cluster is its last message.
CLUSTERS = TopicSpec("gpucloud.clusters.v1", partitions=1, retention_ms=-1, carries=(ClusterNodes,))
# Kept: metering credits the quarantines in it.
NODE_HEALTH = TopicSpec("gpucloud.nodes.health.v1", retention_ms=-1, carries=(NodeHealthChanged,))
ALERTS = TopicSpec("gpucloud.alerts.v1", carries=(AlertStateChanged,))
USAGE = TopicSpec("gpucloud.usage.v1", retention_ms=-1, carries=(UsageRecorded,))
BILLING_ALERTS = TopicSpec("gpucloud.billing.alerts.v1", carries=(BudgetThresholdCrossed,))
AUDIT = TopicSpec("gpucloud.audit.v1", retention_ms=-1, carries=(AuditRecorded,))

ALL_TOPICS: tuple[TopicSpec, ...] = (
    TENANTS, INSTANCE_LIFECYCLE, JOB_LIFECYCLE, INFERENCE_LIFECYCLE, INSTANCE_COMMANDS,
    STORAGE_USAGE, TELEMETRY, NODE_HEALTH, ALERTS, USAGE, BILLING_ALERTS, AUDIT, CLUSTERS,
)  # fmt: skip


def dead_letter_topic(consumer_group: str) -> TopicSpec:
    """Each consumer group parks the messages it cannot process in its own topic."""
    return TopicSpec(f"gpucloud.dlq.{consumer_group}", partitions=1, retention_ms=-1)


async def ensure_topics(
    kafka: KafkaConnection,
    specs: tuple[TopicSpec, ...] | list[TopicSpec],
    *,
    replication_factor: int = 1,
) -> None:
    """Create the topics that do not exist yet: the operator's step, as the admin
    principal (services may not create topics; see `require_topics`)."""
    admin = AIOKafkaAdminClient(client_id="gpucloud-topics", **kafka.client_options())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        # By name, once each: a create request naming a topic twice is refused whole.
        missing = list({spec.name: spec for spec in specs if spec.name not in existing}.values())
        if not missing:
            return
        new_topics = [
            NewTopic(
                name=spec.name,
                num_partitions=spec.partitions,
                replication_factor=replication_factor,
                topic_configs={"retention.ms": str(spec.retention_ms), "min.insync.replicas": "1"},
            )
            for spec in missing
        ]
        # Another service may create a topic between our list and create.
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics(new_topics)
        log.info("created topics", extra={"topics": [spec.name for spec in missing]})
    finally:
        await admin.close()


class MissingTopics(RuntimeError):
    """Topics a service uses do not exist (or its principal may not see them)."""


async def require_topics(
    kafka: KafkaConnection, specs: tuple[TopicSpec, ...] | list[TopicSpec]
) -> None:
    """Fail with the names of the missing topics. Services may not create topics: the
    operator's Kafka access step creates them with the ACLs (`gpucloud_libs.kafka_access`)."""
    admin = AIOKafkaAdminClient(client_id="gpucloud-topics", **kafka.client_options())
    await admin.start()
    try:
        # A principal sees only the topics it may describe, so this also catches missing ACLs.
        visible = set(await admin.list_topics())
    finally:
        await admin.close()
    missing = sorted({spec.name for spec in specs} - visible)
    if missing:
        raise MissingTopics(
            f"Kafka topics missing or not visible to {kafka.username or 'this client'}: "
            f"{', '.join(missing)}; run the Kafka access step (python -m gpucloud_libs.kafka_access)"
        )
