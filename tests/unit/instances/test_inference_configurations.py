"""An inference service's stored documents (inference/configurations.py) and how the API
shows them (inference/views.py `service_view`, `revisions_view`): its first
configuration, the next one a change makes, what it claims of its tenant's quota, the
service document as inserted, and the view read back from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from gpucloud_instances.admission import Placed, spec_fields
from gpucloud_instances.documents import (
    ServiceConfigDoc,
    ServiceDoc,
    ServiceReplicaDoc,
    TenantDoc,
)
from gpucloud_instances.inference.configurations import (
    claimed_gpus,
    first_configuration,
    latest_revision,
    next_config,
    service_document,
    template_doc,
)
from gpucloud_instances.inference.schemas import InferenceServiceCreate, UpdateStrategy
from gpucloud_instances.inference.views import revisions_view, service_view
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.identity import Identity

from .fixtures import a_spec

AT = datetime(2026, 11, 27, 4, 0, tzinfo=UTC)
KEY = "acme/chat"
BODY = {"image": "vllm/vllm-openai:v0.6.3.post1", "specName": "h100x1", "port": 8000}
TENANT = cast(TenantDoc, {"_id": "acme", "namespace": "gpc-acme", "quota": {}})
USER = Identity(subject="u-1", role="tenant-user", tenant_id="acme", expires_at=0)


def body(**fields: Any) -> InferenceServiceCreate:
    return InferenceServiceCreate.model_validate({**BODY, **fields})


def replica(name: str, revision: int, *, ready: bool = True) -> ServiceReplicaDoc:
    return ServiceReplicaDoc(
        name=name, revision=revision, node="n1", address="10.1.0.7", ready=ready,
        terminating=False,
    )  # fmt: skip


def a_service(**fields: Any) -> ServiceDoc:
    doc = service_document(
        "chat", USER, TENANT, spec_fields(a_spec(name="h100x1"), ["zone-a"], Placed("local-1", "local-1")), body(),
        storages=[{"storageID": "ds-1", "readOnly": True}], created=AT, project="default",
    )  # fmt: skip
    return cast(ServiceDoc, {**doc, **fields})


def test_a_new_service_starts_at_generation_and_revision_one() -> None:
    config = first_configuration(KEY, body(minReplicas=2, maxReplicas=5), AT)
    assert (config["_id"], config["key"]) == ("acme/chat@1", KEY)
    assert (config["generation"], config["revision"], config["rolled_back_from"]) == (1, 1, None)
    assert (config["min_replicas"], config["max_replicas"]) == (2, 5)
    assert (config["max_surge"], config["max_unavailable"]) == (1, 0)
    assert (config["autoscaling"], config["created_at"]) == (None, AT)


def test_a_service_without_a_maximum_runs_its_minimum_at_most() -> None:
    assert first_configuration(KEY, body(minReplicas=3), AT)["max_replicas"] == 3


def test_a_revisions_template_is_stored_by_its_wire_names() -> None:
    create = body(
        env=[{"name": "HF_HOME", "value": "/cache/hf"}], command=["python3"], args=["-m", "x"],
        volumes=[{"name": "cache", "mountPath": "/cache"}], runAsUser=1000,
    )  # fmt: skip
    assert template_doc(create) == {
        "image": "vllm/vllm-openai:v0.6.3.post1",
        "env": [{"name": "HF_HOME", "value": "/cache/hf"}],
        "command": ["python3"], "args": ["-m", "x"],
        "volumes": [{"name": "cache", "mountPath": "/cache", "readOnly": False, "storageID": None}],
        "runAsUser": 1000,
    }  # fmt: skip
    assert first_configuration(KEY, create, AT)["template"] == template_doc(create)


def test_autoscaling_is_stored_by_its_wire_names() -> None:
    config = first_configuration(
        KEY, body(minReplicas=0, maxReplicas=4, autoscaling={"targetInFlight": 4}), AT
    )
    assert config["autoscaling"] == {
        "targetInFlight": 4.0, "scaleDownDelaySeconds": 60, "scaleToZeroAfterSeconds": 300,
    }  # fmt: skip


def test_the_next_configuration_is_the_next_generation_under_its_own_id() -> None:
    first = first_configuration(KEY, body(), AT)
    later = next_config(
        first, template=first["template"], revision=1, min_replicas=2, max_replicas=6,
        strategy=UpdateStrategy(max_surge=0, max_unavailable=1), autoscaling=None,
        rolled_back_from=None,
    )  # fmt: skip
    assert (later["_id"], later["generation"], later["revision"]) == ("acme/chat@2", 2, 1)
    assert (later["min_replicas"], later["max_replicas"]) == (2, 6)
    assert (later["max_surge"], later["max_unavailable"]) == (0, 1)
    assert later["created_at"] > AT


def test_a_roll_back_is_a_new_revision_that_names_the_one_it_copies() -> None:
    first = first_configuration(KEY, body(), AT)
    second = next_config(
        first, template={**first["template"], "image": "vllm/vllm-openai:v0.7.0"}, revision=2,
        min_replicas=1, max_replicas=1, strategy=UpdateStrategy(), autoscaling=None,
        rolled_back_from=None,
    )  # fmt: skip
    back = next_config(
        second, template=first["template"], revision=latest_revision([first, second]) + 1,
        min_replicas=1, max_replicas=1, strategy=UpdateStrategy(), autoscaling=None,
        rolled_back_from=1,
    )  # fmt: skip
    assert (back["generation"], back["revision"], back["rolled_back_from"]) == (3, 3, 1)
    assert back["template"]["image"] == "vllm/vllm-openai:v0.6.3.post1"


def test_the_latest_revision_is_the_highest_whatever_the_order() -> None:
    configs = [cast(ServiceConfigDoc, {"revision": revision}) for revision in (1, 3, 2)]
    assert latest_revision(configs) == 3


def test_a_service_of_slices_claims_its_weighted_replicas_rounded_up() -> None:
    config = first_configuration(KEY, body(minReplicas=2, maxReplicas=3), AT)
    # (3 replicas + 1 surge) x 2 slices of 1/7 = 8/7 of a GPU: two GPUs of quota.
    assert claimed_gpus(config, GpuShare.mig("1g.10gb"), 2) == 2
    assert claimed_gpus(config, GpuShare.whole(), 2) == 8
    still = next_config(
        config, template=config["template"], revision=1, min_replicas=2, max_replicas=3,
        strategy=UpdateStrategy(max_surge=0, max_unavailable=1), autoscaling=None,
        rolled_back_from=None,
    )  # fmt: skip
    assert claimed_gpus(still, GpuShare.whole(), 2) == 6  # no surge, no extra claim


def test_a_new_service_document_holds_its_spec_tenant_and_nothing_observed() -> None:
    doc = a_service()
    assert (doc["_id"], doc["tenant_id"], doc["service_id"]) == (KEY, "acme", "chat")
    assert (doc["user_id"], doc["namespace"], doc["zones"]) == ("u-1", "gpc-acme", ["zone-a"])
    assert (doc["spec_name"], doc["gpu_type"], doc["gpu_count"]) == ("h100x1", "H100", 1)
    assert (doc["port"], doc["readiness_path"], doc["zone"]) == (8000, "/", None)
    assert (doc["applied_generation"], doc["applied_revision"], doc["version"]) == (0, 0, 0)
    assert (doc["replicas"], doc["runs"], doc["scale"]) == ([], {}, None)
    assert (doc["outbox"], doc["has_outbox"]) == ([], False)
    assert doc["created_at"] == doc["updated_at"] == AT


def test_each_use_of_a_services_name_is_a_new_incarnation() -> None:
    """A deletion request left over from an earlier service of the same name is not
    the new one's."""
    first, second = a_service()["incarnation"], a_service()["incarnation"]
    assert len(first) == 8
    assert int(first, 16) >= 0
    assert first != second


def configs(*, revision: int = 1) -> list[ServiceConfigDoc]:
    first = first_configuration(KEY, body(minReplicas=2, maxReplicas=4), AT)
    if revision == 1:
        return [first]
    later = next_config(
        first, template={**first["template"], "image": "vllm/vllm-openai:v0.7.0"},
        revision=revision, min_replicas=2, max_replicas=4, strategy=UpdateStrategy(),
        autoscaling=None, rolled_back_from=None,
    )  # fmt: skip
    later["created_at"] = AT + timedelta(hours=1)
    return [first, later]


def test_a_service_view_counts_its_serving_replicas_of_the_current_revision() -> None:
    replicas = [replica("a", 2), replica("b", 1), replica("c", 2, ready=False)]
    view = service_view(
        a_service(replicas=replicas, applied_revision=2), configs(revision=2),
        url="https://chat--acme.example/", deleting=False, cluster="local-2",
    )  # fmt: skip
    assert (view.state, view.revision, view.image) == ("updating", 2, "vllm/vllm-openai:v0.7.0")
    assert (view.desired_replicas, view.ready_replicas, view.updated_replicas) == (2, 2, 1)
    assert [r.name for r in view.replicas] == ["a", "b", "c"]
    assert view.storage_ids == ["ds-1"]
    assert view.cluster == "local-2"
    assert (view.min_replicas, view.max_replicas, view.url) == (2, 4, "https://chat--acme.example/")


def test_the_desired_replicas_follow_the_autoscaler_once_it_sized_the_service() -> None:
    scaled = a_service(scale={"replicas": 3, "busy_at": None, "lower_since": None})
    assert (
        service_view(scaled, configs(), url="u", deleting=False, cluster="local-1").desired_replicas
        == 3
    )
    unsized = service_view(a_service(), configs(), url="u", deleting=False, cluster="local-1")
    assert (unsized.desired_replicas, unsized.state) == (2, "deploying")


def test_a_service_being_deleted_wants_no_replicas() -> None:
    view = service_view(
        a_service(replicas=[replica("a", 1)]), configs(), url="u", deleting=True, cluster="local-1"
    )
    assert (view.state, view.desired_replicas, view.ready_replicas) == ("deleting", 0, 1)


def test_a_stored_revision_without_a_uid_reads_back_with_none() -> None:
    [config] = configs()
    del config["template"]["runAsUser"]
    assert (
        service_view(a_service(), [config], url="u", deleting=False, cluster="local-1").run_as_user
        is None
    )


def test_each_revision_is_listed_once_from_the_generation_that_made_it() -> None:
    first, second = configs(revision=2)
    rescaled = {
        **second,
        "_id": "acme/chat@3",
        "generation": 3,
        "created_at": AT + timedelta(hours=2),
    }
    revisions = revisions_view([first, second, cast(ServiceConfigDoc, rescaled)])
    assert [(r.revision, r.image, r.created_at) for r in revisions] == [
        (1, "vllm/vllm-openai:v0.6.3.post1", AT),
        (2, "vllm/vllm-openai:v0.7.0", AT + timedelta(hours=1)),
    ]
