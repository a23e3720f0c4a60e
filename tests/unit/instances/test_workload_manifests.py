"""What Kubernetes is asked to run for each kind: a job's retries, deadline and ranks,
a service's rollout, drain and spread, and what every kind's pod shares."""

from __future__ import annotations

import dataclasses

from gpucloud_instances import manifests
from gpucloud_instances.inference import manifests as service_manifests
from gpucloud_instances.jobs import manifests as job_manifests
from gpucloud_instances.schemas import InstanceTemplate

POD = manifests.WorkloadPod(
    namespace_name="gpc-acme", tenant_id="acme", spec_name="h100x1", image="trainer:1",
    template=InstanceTemplate(), cpu="8", memory="64Gi", gpus=1, gpu_type="NVIDIA-H100",
    zones=["zone-a"], command=["python", "train.py"], pull_secrets=["gpc-registry-r1"],
)  # fmt: skip


def test_every_kinds_pod_runs_restricted_with_only_its_tenants_pull_secret() -> None:
    spec = POD.spec(POD.container(), restart_policy="Never")
    [container] = spec["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["imagePullPolicy"] == "Always"  # another tenant's pulled image is not ours
    assert spec["automountServiceAccountToken"] is False
    assert spec["imagePullSecrets"] == [{"name": "gpc-registry-r1"}]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_a_job_retries_as_asked_never_restarts_a_pod_and_keeps_its_logs_a_day() -> None:
    pods = job_manifests.JobPods(POD, "train", retry_limit=2, deadline_seconds=3600)
    job = job_manifests.batch_job(pods, parallelism=4, completions=8)
    spec = job["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (4, 8, 2)
    assert spec["activeDeadlineSeconds"] == 3600
    assert spec["ttlSecondsAfterFinished"] == 24 * 3600
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    labels = spec["template"]["metadata"]["labels"]
    assert (labels[manifests.TENANT], labels[manifests.JOB]) == ("acme", "train")


def test_a_multi_node_job_puts_one_rank_per_node_and_tells_each_where_rank_0_is() -> None:
    pods = job_manifests.JobPods(POD, "dist", retry_limit=1, deadline_seconds=None)
    job_set = job_manifests.job_set(pods, nodes=3)
    [workers] = job_set["spec"]["replicatedJobs"]
    job_spec = workers["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"]) == (3, 3)
    assert job_spec["completionMode"] == "Indexed"
    assert job_spec["backoffLimit"] == 0  # a lost rank restarts them all (JobSet)
    assert job_set["spec"]["failurePolicy"] == {"maxRestarts": 1}
    pod_spec = job_spec["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod_spec["containers"][0]["env"]}
    assert env == {"GPUCLOUD_NODES": "3", "GPUCLOUD_LEADER_HOST": "job-dist-workers-0-0.job-dist"}
    [apart] = pod_spec["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert apart["topologyKey"] == "kubernetes.io/hostname"


def test_a_service_rolls_out_under_its_strategy_drains_and_spreads_its_replicas() -> None:
    pod = dataclasses.replace(POD, command=None)
    deployment = service_manifests.inference_deployment(
        pod, service_id="chat", revision=3, serving=service_manifests.Serving(8000, "/health"),
        rollout=service_manifests.Rollout(replicas=2, max_surge=1, max_unavailable=0),
    )  # fmt: skip
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    template = spec["template"]
    assert template["metadata"]["labels"][manifests.REVISION] == "3"
    [container] = template["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"] == {"port": 8000, "path": "/health"}
    drain = service_manifests.REPLICA_DRAIN_S
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": drain}}
    assert template["spec"]["terminationGracePeriodSeconds"] > drain
    spread = {c["topologyKey"] for c in template["spec"]["topologySpreadConstraints"]}
    assert spread == {"kubernetes.io/hostname", manifests.ZONE_LABEL}
    lost = [t for t in template["spec"]["tolerations"] if t.get("effect") == "NoExecute"]
    assert {t["tolerationSeconds"] for t in lost} == {service_manifests.LOST_NODE_TOLERATION_S}


def test_time_sliced_gpus_keep_their_node_to_one_tenant() -> None:
    """Time-slicing does not fence memory: no node may hold another tenant's
    time-sliced pod, in any namespace. Whole GPUs need no such rule."""
    shared = dataclasses.replace(POD, gpu_resource="nvidia.com/gpu.shared")
    affinity = shared.spec(shared.container(), restart_policy="Always")["affinity"]
    [rule] = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert rule["namespaceSelector"] == {}
    assert {"key": manifests.TENANT, "operator": "NotIn", "values": ["acme"]} in (
        rule["labelSelector"]["matchExpressions"]
    )
    whole = POD.spec(POD.container(), restart_policy="Always")["affinity"]
    assert "podAntiAffinity" not in whole
