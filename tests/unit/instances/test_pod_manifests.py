"""What a tenant's pod holds, whichever kind makes it (manifests.py, WorkloadPod), and an
instance's own pod and Service (instances/manifests.py): the GPUs it asks for, where it
may be placed, what it is given (env, storages' secrets, volumes) and how it starts."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gpucloud_instances import manifests
from gpucloud_instances.documents import JobDoc
from gpucloud_instances.instances.manifests import instance_pod, instance_service, pod_name
from gpucloud_instances.schemas import InstanceTemplate
from gpucloud_libs.gpu_shares import SHARING_LABEL

from .fixtures import a_pod


def template(**fields: Any) -> InstanceTemplate:
    return InstanceTemplate.model_validate(fields)


def node_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    [term] = required["nodeSelectorTerms"]
    terms: list[dict[str, Any]] = term["matchExpressions"]
    return terms


def test_a_pod_asks_for_exactly_its_specs_cpu_memory_and_gpus_as_requests_and_limits() -> None:
    container = a_pod(cpu="16", memory="128Gi", gpus=4).container()
    amounts = {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}


def test_a_mig_pod_asks_for_its_slices_and_no_whole_gpu() -> None:
    pod = a_pod(gpus=2, gpu_resource="nvidia.com/mig-3g.40gb")
    resources = pod.container()["resources"]
    assert resources["limits"]["nvidia.com/mig-3g.40gb"] == "2"
    assert "nvidia.com/gpu" not in resources["limits"]
    # Slices fence memory: unlike time-slicing, the node need not serve one tenant.
    assert SHARING_LABEL not in pod.labels(pod.owner(manifests.JOB, "j"))
    assert "podAntiAffinity" not in pod.spec(pod.container(), restart_policy="Never")["affinity"]


def test_a_time_sliced_pod_is_labelled_so_that_other_tenants_keep_off_its_node() -> None:
    pod = a_pod(gpu_resource="nvidia.com/gpu.shared")
    labels = pod.labels(pod.owner(manifests.INSTANCE, "nb"))
    assert labels == {
        manifests.MANAGED: "true", manifests.TENANT: "t", manifests.INSTANCE: "nb",
        manifests.SPEC: "s", SHARING_LABEL: "time-sliced",
    }  # fmt: skip


def test_a_pod_goes_only_to_a_healthy_node_of_its_gpu_product_in_its_zones() -> None:
    spec = a_pod(gpu_type="NVIDIA-H100-80GB-HBM3", zones=["zone-a", "zone-c"]).spec(
        {}, restart_policy="Never"
    )
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert node_terms(spec) == [
        {"key": manifests.HEALTH, "operator": "NotIn", "values": ["quarantined"]},
        {"key": manifests.ZONE_LABEL, "operator": "In", "values": ["zone-a", "zone-c"]},
    ]
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "nodeName" not in spec


def test_a_pod_of_any_zone_still_keeps_off_quarantined_nodes() -> None:
    spec = a_pod(zones=[]).spec({}, restart_policy="Never")
    assert node_terms(spec) == [
        {"key": manifests.HEALTH, "operator": "NotIn", "values": ["quarantined"]}
    ]


def test_a_pod_runs_as_non_root_and_as_the_uid_its_template_names() -> None:
    spec = a_pod(template=template(runAsUser=1000)).spec({}, restart_policy="Always")
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 1000,
    }  # fmt: skip
    assert spec["enableServiceLinks"] is False
    assert spec["priorityClassName"] == manifests.INSTANCE_PRIORITY_CLASS
    own = a_pod().spec({}, restart_policy="Always")["securityContext"]
    assert "runAsUser" not in own  # the image's own user, which must then be non-root


def test_a_pod_without_pull_secrets_names_none() -> None:
    assert "imagePullSecrets" not in a_pod(pull_secrets=[]).spec({}, restart_policy="Never")


def test_the_first_object_storage_is_also_given_unprefixed_for_s3_sdks() -> None:
    pod = a_pod(storage_secrets=[("gpc-s3-data", "DATA_"), ("gpc-s3-out", "OUT_")])
    assert pod.container()["envFrom"] == [
        {"secretRef": {"name": "gpc-s3-data"}},
        {"prefix": "DATA_", "secretRef": {"name": "gpc-s3-data"}},
        {"prefix": "OUT_", "secretRef": {"name": "gpc-s3-out"}},
    ]
    assert "envFrom" not in a_pod().container()


def test_a_pod_mounts_volume_storages_by_claim_and_scratch_space_as_empty_dirs() -> None:
    volumes = [
        {"name": "data", "mountPath": "/data", "storageID": "ds-1", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    pod = a_pod(template=template(volumes=volumes))
    assert pod.spec({}, restart_policy="Never")["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "gpc-storage-ds-1"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    assert pod.container()["volumeMounts"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch", "readOnly": False},
    ]


def test_the_tenants_env_reaches_the_container_in_order() -> None:
    envs = [{"name": "MODE", "value": "train"}, {"name": "EPOCHS", "value": "3"}]
    assert a_pod(template=template(envs=envs)).container()["env"] == envs


def test_a_command_and_args_replace_the_images_only_when_given() -> None:
    container = a_pod(command=["python", "serve.py"], args=["--port", "8000"]).container()
    assert (container["command"], container["args"]) == (["python", "serve.py"], ["--port", "8000"])
    bare = a_pod().container()
    assert "command" not in bare
    assert "args" not in bare


def test_a_pod_is_made_from_its_stored_workload_document() -> None:
    job = cast(
        JobDoc,
        {
            "namespace": "gpc-acme", "tenant_id": "acme", "spec_name": "a100-mig", "cpu": "4",
            "memory": "32Gi", "gpu_count": 3, "gpu_type": "NVIDIA-A100", "zones": ["zone-b"],
            "gpu_resource": "nvidia.com/mig-1g.5gb", "gpu_weight": "1/7",
        },
    )  # fmt: skip
    pod = manifests.WorkloadPod.of(
        job, image="trainer:2", template=InstanceTemplate(), storage_secrets=[],
        pull_secrets=["gpc-registry-r1"], command=["train"],
    )  # fmt: skip
    assert (pod.namespace_name, pod.tenant_id, pod.gpus) == ("gpc-acme", "acme", 3)
    assert pod.gpu_resource == "nvidia.com/mig-1g.5gb"
    assert (pod.image, pod.command) == ("trainer:2", ["train"])
    assert pod.pull_secrets == ["gpc-registry-r1"]
    assert pod.zones == ["zone-b"]
    assert pod.zones is not job["zones"]  # the pod never changes the document


def test_an_instance_pod_is_named_for_the_instance_and_labelled_its_tenants() -> None:
    pod = instance_pod(a_pod(namespace_name="gpc-acme", tenant_id="acme"), "nb-1")
    metadata = pod["metadata"]
    assert (metadata["name"], metadata["namespace"]) == (pod_name("nb-1"), "gpc-acme")
    assert metadata["name"] == "inst-nb-1"
    assert metadata["labels"] == {
        manifests.MANAGED: "true", manifests.TENANT: "acme", manifests.INSTANCE: "nb-1",
        manifests.SPEC: "s",
    }  # fmt: skip
    assert pod["spec"]["restartPolicy"] == "Always"


def test_an_instance_from_a_warm_unit_is_labelled_so() -> None:
    pod = instance_pod(a_pod(), "nb-1", ("stock-h100-ab12", "h100-a-0"))
    assert pod["metadata"]["labels"][manifests.FROM_STOCK] == "true"
    assert manifests.FROM_STOCK not in instance_pod(a_pod(), "nb-1")["metadata"]["labels"]


def test_an_instance_exposes_its_ports_named_by_number() -> None:
    ports = [{"port": 8888, "isPublic": True}, {"port": 5353, "protocol": "UDP"}]
    container = instance_pod(a_pod(template=template(ports=ports)), "nb")["spec"]["containers"][0]
    assert container["ports"] == [
        {"containerPort": 8888, "protocol": "TCP", "name": "p8888"},
        {"containerPort": 5353, "protocol": "UDP", "name": "p5353"},
    ]
    assert "readinessProbe" not in container  # no port is its probe


def test_a_shell_line_runs_under_sh_and_a_command_list_runs_as_given() -> None:
    shell = instance_pod(a_pod(template=template(cmd="sleep 5 && serve")), "nb")
    assert shell["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", "sleep 5 && serve"]
    assert "args" not in shell["spec"]["containers"][0]
    listed = instance_pod(
        a_pod(template=template(command=["jupyter", "lab"], args=["--no-browser"])), "nb"
    )
    [container] = listed["spec"]["containers"]
    assert (container["command"], container["args"]) == (["jupyter", "lab"], ["--no-browser"])


LAB = {"port": 8888, "isProbe": True}


@pytest.mark.parametrize(
    ("port", "probe"),
    [
        ({**LAB, "baseUrl": "/lab"}, {"httpGet": {"port": 8888, "path": "/lab"}}),
        ({**LAB, "baseUrl": "/"}, {"httpGet": {"port": 8888, "path": "/"}}),
        (LAB, {"tcpSocket": {"port": 8888}}),  # no base URL: a connect is all it knows
    ],
)
def test_an_instance_is_ready_once_its_probe_port_answers(
    port: dict[str, Any], probe: dict[str, Any]
) -> None:
    pod = instance_pod(a_pod(template=template(ports=[{"port": 80}, port])), "nb")
    readiness = pod["spec"]["containers"][0]["readinessProbe"]
    assert readiness == {**probe, "periodSeconds": 5, "failureThreshold": 3}


def test_an_instance_with_ports_gets_a_service_selecting_its_pod() -> None:
    ports = template(ports=[{"port": 8888}, {"port": 6006, "protocol": "TCP"}])
    service = instance_service("gpc-acme", "acme", "nb-1", ports)
    assert service is not None
    assert service["metadata"]["name"] == "inst-nb-1"
    assert service["metadata"]["labels"] == {
        manifests.MANAGED: "true", manifests.TENANT: "acme", manifests.INSTANCE: "nb-1",
    }  # fmt: skip
    assert service["spec"]["selector"] == {manifests.INSTANCE: "nb-1"}
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("p8888", 8888, 8888), ("p6006", 6006, 6006),
    ]  # fmt: skip


def test_an_instance_without_ports_gets_no_service() -> None:
    assert instance_service("gpc-acme", "acme", "nb-1", InstanceTemplate()) is None


def test_a_tenant_namespace_enforces_the_restricted_pod_security_standard() -> None:
    namespace = manifests.namespace("gpc-acme", {manifests.TENANT: "acme"})
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
    assert (labels[manifests.MANAGED], labels[manifests.TENANT]) == ("true", "acme")


def test_tenant_workloads_preempt_warm_stock_placeholders_which_preempt_nothing() -> None:
    classes = {c["metadata"]["name"]: c for c in manifests.priority_classes()}
    instance, stock = classes["gpucloud-instance"], classes["gpucloud-stock"]
    assert instance["value"] > 0 > stock["value"]
    assert stock["preemptionPolicy"] == "Never"
    assert "preemptionPolicy" not in instance
