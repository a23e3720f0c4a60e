"""A job submission as admitted (jobs/service.py's pure parts, workloads/admitted.py,
workloads/replays.py, admission.py `known_spec`): the GPUs it claims, the jobs refused
for being bigger than the whole quota, the document stored with its first event, and a
replay told apart from a different request under the same name."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from gpucloud_instances.admission import Placed, known_spec
from gpucloud_instances.documents import TenantDoc
from gpucloud_instances.jobs.schemas import JobCreate
from gpucloud_instances.jobs.service import _fits_quota, _job_document, job_gpus
from gpucloud_instances.workloads.admitted import NewWorkload
from gpucloud_instances.workloads.replays import request_hash, same_request
from gpucloud_libs.errors import Conflict, QuotaExceeded, ValidationFailed
from gpucloud_libs.identity import Identity

from .fixtures import a_spec

SPEC = a_spec(name="h100x2", gpu_type="NVIDIA-H100", gpu_num=2, zones=["zone-a", "zone-b"])
MIG = a_spec(name="mig", gpu_num=2, gpu_resource="nvidia.com/mig-1g.10gb", gpu_weight="1/7")
USER = Identity(subject="u-1", role="tenant-user", tenant_id="acme", expires_at=0)


def tenant(max_gpus: int, borrow_gpus: int | None = None) -> TenantDoc:
    quota: dict[str, Any] = {"max_gpus": max_gpus, "max_instances": 4}
    if borrow_gpus is not None:
        quota["borrow_gpus"] = borrow_gpus
    return cast(TenantDoc, {"_id": "acme", "namespace": "gpc-acme", "quota": quota})


def submitted(**fields: Any) -> JobCreate:
    return JobCreate.model_validate({"image": "pytorch/pytorch", "specName": "h100x2", **fields})


def admitted(body: JobCreate, **fields: Any) -> NewWorkload:
    chosen: dict[str, Any] = {
        "key": "acme/train", "workload_id": "train", "identity": USER, "tenant": tenant(8),
        "spec": SPEC, "zones": ["zone-b"], "placed": Placed("local-1", "region-1"), "storages": [{"storageID": "ds-1", "readOnly": False}],
        "request_hash": request_hash(body, id_field="job_id"), "idempotency_key": "k-1",
        "project": "default",
        **fields,
    }  # fmt: skip
    return NewWorkload(**chosen)


def test_a_job_claims_each_pods_gpus_weighed_and_rounded_up() -> None:
    assert job_gpus(SPEC, 3) == 6
    assert job_gpus(MIG, 3) == 1  # 6 slices of 1/7
    assert job_gpus(MIG, 4) == 2  # 8 slices of 1/7


def test_a_job_bigger_than_the_quota_and_all_it_may_borrow_is_refused_at_once() -> None:
    _fits_quota(tenant(4), SPEC, 2, "u-1", "default")
    _fits_quota(tenant(4, borrow_gpus=2), SPEC, 3, "u-1", "default")
    with pytest.raises(QuotaExceeded) as refused:
        _fits_quota(tenant(4, borrow_gpus=1), SPEC, 3, "u-1", "default")
    assert refused.value.extensions == {
        "limit": "max_gpus", "limit_value": 5, "in_use": 0, "requested": 6,
    }  # fmt: skip
    assert "needs 6 GPUs at once" in refused.value.detail


def test_a_job_bigger_than_its_users_own_limit_is_refused_at_once() -> None:
    limited = cast(TenantDoc, {
        **tenant(8), "user_limits": {"u-1": {"max_gpus": 2, "monthly_spend_cents": None}},
    })  # fmt: skip
    _fits_quota(limited, SPEC, 2, "u-2", "default")  # another user: the tenant's quota alone
    with pytest.raises(QuotaExceeded) as refused:
        _fits_quota(limited, SPEC, 2, "u-1", "default")
    assert refused.value.extensions["limit"] == "user_max_gpus"
    assert "your own limit is 2 GPUs at once" in refused.value.detail


def test_a_job_bigger_than_its_projects_share_and_what_it_may_borrow_is_refused_at_once() -> None:
    project = {"name": "Vision", "max_gpus": 2, "borrow_gpus": 2, "monthly_budget_cents": None,
               "members": ["u-1"]}  # fmt: skip
    carved = cast(TenantDoc, {**tenant(8), "projects": {"vision": project}})
    _fits_quota(carved, SPEC, 2, "u-1", "vision")  # 4 GPUs: its share and all it borrows
    _fits_quota(carved, SPEC, 3, "u-1", "default")  # 6: what vision leaves of the 8
    with pytest.raises(QuotaExceeded) as refused:
        _fits_quota(carved, SPEC, 3, "u-1", "vision")
    assert refused.value.extensions["limit"] == "project_max_gpus"
    assert refused.value.extensions["limit_value"] == 4


def test_a_spec_the_catalog_does_not_hold_is_refused_on_its_field() -> None:
    assert known_spec("h100x2", SPEC) is SPEC
    with pytest.raises(ValidationFailed, match="unknown spec 'h200x8'") as refused:
        known_spec("h200x8", None)
    assert refused.value.extensions["errors"] == [
        {"loc": ["body", "specName"], "msg": "unknown spec", "type": "unknown_spec"}
    ]


def test_every_kind_stores_who_asked_its_spec_and_where_it_may_run() -> None:
    new = admitted(submitted())
    assert new.document_fields("job_id") == {
        "_id": "acme/train", "tenant_id": "acme", "job_id": "train", "user_id": "u-1", "project": "default",
        "idempotency_key": "k-1", "request_hash": new.request_hash, "spec_name": "h100x2",
        "gpu_type": "NVIDIA-H100", "gpu_count": 2, "gpu_resource": "nvidia.com/gpu",
        "gpu_weight": "1", "cpu": "8", "memory": "64Gi", "zones": ["zone-b"], "cluster": "local-1", "region": "region-1",
        "storages": [{"storageID": "ds-1", "readOnly": False}], "namespace": "gpc-acme",
    }  # fmt: skip


def test_a_submitted_job_is_stored_queued_with_its_first_event() -> None:
    before = datetime.now(UTC)
    body = submitted(
        command=["torchrun", "train.py"], retryLimit=2, deadlineSeconds=600, priority=3
    )
    doc = _job_document(admitted(body), body)
    assert (doc["state"], doc["sequence"], doc["revision"]) == ("queued", 1, 0)
    assert doc["has_outbox"] is True
    assert before <= doc["created_at"] == doc["updated_at"] <= datetime.now(UTC)
    assert doc["history"] == [{"state": "queued", "at": doc["created_at"], "reason": None}]
    [event] = doc["outbox"]
    assert event["id"] == "acme/train#1"
    data = json.loads(event["value"])
    assert (data["state"], data["previous_state"], data["sequence"]) == ("queued", None, 1)
    assert (doc["command"], doc["args"]) == (["torchrun", "train.py"], None)
    assert (doc["retry_limit"], doc["deadline_seconds"], doc["priority"]) == (2, 600, 3)
    assert (doc["admitted_at"], doc["exit_code"], doc["runs"]) == (None, None, {})


def test_a_jobs_completions_default_to_its_parallel_pods() -> None:
    wide = submitted(parallelism=4)
    doc = _job_document(admitted(wide), wide)
    assert (doc["parallelism"], doc["completions"], doc["nodes"]) == (4, 4, None)
    many = submitted(parallelism=4, completions=40)
    assert _job_document(admitted(many), many)["completions"] == 40


def test_a_multi_node_jobs_pods_are_its_nodes() -> None:
    spread = submitted(nodes=3)
    doc = _job_document(admitted(spread), spread)
    assert (doc["parallelism"], doc["completions"], doc["nodes"]) == (3, 3, 3)


def test_a_jobs_env_volumes_and_user_are_stored_as_a_template() -> None:
    body = submitted(
        env=[{"name": "EPOCHS", "value": "3"}], runAsUser=1000,
        volumes=[{"name": "data", "mountPath": "/data", "storageID": "ds-1", "readOnly": True}],
    )  # fmt: skip
    template = _job_document(admitted(body), body)["template"]
    assert template["envs"] == [{"name": "EPOCHS", "value": "3"}]
    assert template["volumes"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True, "storageID": "ds-1"}
    ]
    assert (template["runAsUser"], template["ports"]) == (1000, [])


ADA = Identity(subject="u-ada", role="tenant-user", tenant_id="acme", expires_at=0,
               projects=("default", "vision"))  # fmt: skip


def test_a_replay_of_the_same_request_passes_and_another_under_its_name_conflicts() -> None:
    first = submitted(jobID="train", parallelism=2)
    stored = {"request_hash": request_hash(first, id_field="job_id")}
    replay = request_hash(submitted(parallelism=2), id_field="job_id")
    same_request(stored, replay, "job 'train'", caller=ADA)
    other = request_hash(submitted(jobID="train", parallelism=3), id_field="job_id")
    with pytest.raises(
        Conflict, match="job 'train' was already submitted with a different"
    ) as conflict:
        same_request(stored, other, "job 'train'", caller=ADA, verb="submitted", job_id="train")
    assert conflict.value.extensions == {"job_id": "train"}


def test_a_replay_by_another_projects_member_answers_nothing_of_the_workload() -> None:
    """Decision 142: the same body under another project's id is no replay for Bob;
    the id is taken, and that is all he learns."""
    stored = {"request_hash": "h", "project": "vision"}
    bob = ADA.model_copy(update={"subject": "u-bob", "projects": ("default",)})
    with pytest.raises(Conflict, match="job 'train' is taken; choose another id") as taken:
        same_request(stored, "h", "job 'train'", caller=bob, verb="submitted", job_id="train")
    assert taken.value.extensions == {}
    same_request(stored, "h", "job 'train'", caller=ADA)  # hers: replayed


def test_a_request_that_only_spells_a_default_out_is_the_same_request() -> None:
    assert request_hash(submitted(), id_field="job_id") == request_hash(
        submitted(parallelism=1, retryLimit=0, priority=0), id_field="job_id"
    )
