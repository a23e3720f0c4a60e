"""What a start, a job submission and an inference service may ask for (the kinds'
schemas.py): the defaults a short request gets, and each request the API refuses with
a 422 before anything is admitted."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpucloud_instances.inference.schemas import (
    Autoscaling,
    InferenceServiceCreate,
    InferenceServicePatch,
    RollbackRequest,
    UpdateStrategy,
)
from gpucloud_instances.instances.schemas import InstanceCreate
from gpucloud_instances.jobs.schemas import JobCreate

START = {"image": "jupyter/base-notebook", "specName": "l40s"}
JOB = {"image": "pytorch/pytorch", "specName": "h100x8"}
SERVICE = {"image": "vllm/vllm-openai:v0.6.3", "specName": "h100x1", "port": 8000}


def start(**fields: Any) -> InstanceCreate:
    return InstanceCreate.model_validate({**START, **fields})


def job(**fields: Any) -> JobCreate:
    return JobCreate.model_validate({**JOB, **fields})


def service(**fields: Any) -> InferenceServiceCreate:
    return InferenceServiceCreate.model_validate({**SERVICE, **fields})


def test_a_start_with_image_and_spec_alone_runs_now_with_nothing_attached() -> None:
    body = start()
    assert (body.instance_id, body.zone, body.storage_ids) == (None, None, [])
    assert (body.queue, body.priority) == (False, 0)
    assert body.template.ports == []


@pytest.mark.parametrize(
    "fields",
    [{"instanceID": "Box_1"}, {"instanceID": "a--b"}, {"instanceID": "-a"},
     {"instanceID": "a" * 41}, {"specName": "L40S"}, {"zone": "zone a"},
     {"priority": 1001}, {"priority": -1001}, {"storageIDs": [f"s{n}" for n in range(17)]},
     {"gpus": 2}, {"image": "localhost:5000/x"}],
)  # fmt: skip
def test_a_start_is_refused_for_a_malformed_field_or_one_it_does_not_know(
    fields: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        start(**fields)


def test_a_start_takes_the_widest_priorities_and_the_longest_id() -> None:
    assert start(priority=1000, queue=True).priority == 1000
    assert start(priority=-1000).priority == -1000
    assert start(instanceID="a" * 40).instance_id == "a" * 40
    assert start(instanceID="nb-2-x").instance_id == "nb-2-x"


def test_a_job_is_one_pod_with_no_retries_no_deadline_and_the_images_entrypoint() -> None:
    body = job()
    assert (body.parallelism, body.completions, body.nodes, body.pods) == (1, None, None, 1)
    assert (body.retry_limit, body.deadline_seconds, body.priority) == (0, None, 0)
    assert (body.command, body.args) == (None, None)


def test_a_multi_node_job_gives_its_nodes_instead_of_parallelism_or_completions() -> None:
    assert job(nodes=4).pods == 4
    assert job(parallelism=8, completions=32).pods == 8
    with pytest.raises(ValidationError, match="gives nodes, not parallelism"):
        job(nodes=4, parallelism=2)
    with pytest.raises(ValidationError, match="gives nodes, not parallelism"):
        job(nodes=4, completions=4)
    with pytest.raises(ValidationError):
        job(nodes=1)  # one node is an ordinary job


@pytest.mark.parametrize(
    "fields",
    [{"parallelism": 0}, {"parallelism": 65}, {"completions": 1025}, {"retryLimit": 21},
     {"deadlineSeconds": 0}, {"deadlineSeconds": 30 * 24 * 3600 + 1}, {"nodes": 65},
     {"command": ["x"] * 65}, {"jobID": "Train"}, {"ports": [{"port": 80}]}],
)  # fmt: skip
def test_a_job_is_refused_beyond_its_bounds(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        job(**fields)


def test_a_jobs_pods_share_an_instances_env_volumes_and_user_but_no_ports() -> None:
    body = job(
        env=[{"name": "EPOCHS", "value": "3"}], runAsUser=1000,
        volumes=[{"name": "data", "mountPath": "/data", "storageID": "ds-1"}],
    )  # fmt: skip
    template = body.template
    assert [(env.name, env.value) for env in template.envs] == [("EPOCHS", "3")]
    assert [volume.claim_name for volume in template.volumes] == ["gpc-storage-ds-1"]
    assert (template.run_as_user, template.ports, template.cmd) == (1000, [], None)


def test_a_job_refuses_what_an_instance_template_refuses() -> None:
    with pytest.raises(ValidationError, match="names must be unique"):
        job(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])
    with pytest.raises(ValidationError, match="mount paths must be unique"):
        job(volumes=[{"name": "a", "mountPath": "/d"}, {"name": "b", "mountPath": "/d"}])
    with pytest.raises(ValidationError, match="below the allocation"):
        job(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])


def test_a_service_serves_one_replica_from_the_root_path_and_rolls_one_at_a_time() -> None:
    body = service()
    assert (body.min_replicas, body.max_replicas, body.readiness_path) == (1, None, "/")
    assert (body.strategy.max_surge, body.strategy.max_unavailable) == (1, 0)
    assert body.autoscaling is None


def test_a_service_scales_between_its_bounds_and_to_zero_only_when_autoscaled() -> None:
    with pytest.raises(ValidationError, match="maxReplicas cannot be below minReplicas"):
        service(minReplicas=3, maxReplicas=2)
    with pytest.raises(ValidationError, match="minReplicas 0 needs autoscaling"):
        service(minReplicas=0)
    idle = service(minReplicas=0, maxReplicas=4, autoscaling={"targetInFlight": 8})
    assert idle.autoscaling is not None
    scaling = idle.autoscaling
    assert (scaling.scale_down_delay_s, scaling.scale_to_zero_after_s) == (60, 300)
    assert service(minReplicas=2, maxReplicas=2).max_replicas == 2


def test_an_update_must_be_able_to_move() -> None:
    with pytest.raises(ValidationError, match="cannot both be 0"):
        UpdateStrategy.model_validate({"maxSurge": 0, "maxUnavailable": 0})
    down_first = UpdateStrategy.model_validate({"maxSurge": 0, "maxUnavailable": 1})
    assert (down_first.max_surge, down_first.max_unavailable) == (0, 1)


def test_a_services_volumes_are_scratch_space_only() -> None:
    with pytest.raises(ValidationError, match="scratch space: no storageID"):
        service(volumes=[{"name": "m", "mountPath": "/models", "storageID": "ds-1"}])
    scratch = service(volumes=[{"name": "m", "mountPath": "/models"}])
    assert scratch.volumes[0].claim_name is None


@pytest.mark.parametrize(
    "fields",
    [{"port": 0}, {"readinessPath": "health"}, {"readinessPath": "/he alth"},
     {"minReplicas": 65}, {"maxReplicas": 0}, {"serviceID": "Chat"},
     {"autoscaling": {"targetInFlight": 0}}, {"autoscaling": {"targetInFlight": 1, "scaleToZeroAfterSeconds": 0}}],
)  # fmt: skip
def test_a_service_is_refused_beyond_its_bounds(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        service(**fields)


def test_a_service_needs_a_port_to_serve_on() -> None:
    with pytest.raises(ValidationError, match="port"):
        InferenceServiceCreate.model_validate({"image": "x/y", "specName": "h100x1"})


def test_autoscaling_reads_and_writes_its_delays_in_seconds() -> None:
    scaling = Autoscaling.model_validate(
        {"targetInFlight": 2.5, "scaleDownDelaySeconds": 0, "scaleToZeroAfterSeconds": 60}
    )
    assert scaling.model_dump(by_alias=True) == {
        "targetInFlight": 2.5, "scaleDownDelaySeconds": 0, "scaleToZeroAfterSeconds": 60,
    }  # fmt: skip


def test_a_patch_leaves_out_what_it_does_not_change() -> None:
    patch = InferenceServicePatch.model_validate({"minReplicas": 2})
    assert patch.model_fields_set == {"min_replicas"}
    assert (patch.image, patch.env, patch.strategy, patch.max_replicas) == (None, None, None, None)
    with pytest.raises(ValidationError):
        InferenceServicePatch.model_validate({"port": 9000})  # the port is the service's for life
    with pytest.raises(ValidationError, match="below the allocation"):
        InferenceServicePatch.model_validate(
            {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
        )


def test_a_roll_back_names_an_existing_revision_number() -> None:
    assert RollbackRequest.model_validate({"revision": 1}).revision == 1
    with pytest.raises(ValidationError):
        RollbackRequest.model_validate({"revision": 0})
