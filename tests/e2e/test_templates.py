"""The app catalog: every template starts what it says it starts, as the API takes it."""

from __future__ import annotations

import shlex
from typing import Any

from kubernetes_asyncio import client as k8s

from gpucloud_libs.naming import tenant_namespace

from .platform import Platform, assert_problem, bearer
from .support import eventually, unique


async def test_the_catalog_holds_the_four_templates_with_what_they_need(
    platform: Platform,
) -> None:
    account = await platform.tenant()
    _, _, user_key = await platform.member(account, scopes=["instances:read"])
    listed = await platform.http.get("/v1/templates", headers=bearer(user_key))
    assert listed.status_code == 200, listed.text
    templates = {t["templateID"]: t for t in listed.json()}
    assert set(templates) == {"jupyter", "vllm-openai", "triton", "ssh-devbox"}
    triton = templates["triton"]
    assert [(p["port"], p["appProtocol"]) for p in triton["ports"]] == [
        (8000, "http"), (8001, "grpc"), (8002, "http"),
    ]  # fmt: skip
    assert (triton["servingPort"], triton["readinessPath"]) == (8000, "/v2/health/ready")
    for template in templates.values():
        assert ":" in template["image"], template
        assert not template["image"].endswith(":latest"), template
        assert template["suggestedSpecs"], template
    one = await platform.http.get("/v1/templates/vllm-openai", headers=bearer(user_key))
    assert one.json() == templates["vllm-openai"]
    assert_problem(await platform.http.get("/v1/templates/nope", headers=bearer(user_key)), 404)


async def test_every_template_starts_an_instance_or_a_service_as_it_is(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    """Each template's pods pass Pod Security `restricted` on the real API server (the
    tenant namespace enforces it) and run as the template's non-zero uid, which a
    kubelet's runAsNonRoot check needs for an image whose own user is root."""
    account = await platform.tenant(max_gpus=16, max_instances=16)
    spec = await platform.spec(gpus=1)
    namespace = tenant_namespace(account.tenant_id)

    async def made() -> k8s.V1Namespace | None:
        # Made by the controller once the tenant's event reaches it, moments after.
        try:
            found: k8s.V1Namespace = await k8s.CoreV1Api(kube).read_namespace(namespace)
        except k8s.ApiException as error:
            if error.status != 404:
                raise
            return None
        return found

    enforced = await eventually(made, timeout=30, interval=0.5)
    assert enforced.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for template in (await platform.http.get("/v1/templates", headers=platform.admin)).json():
        name = template["templateID"]
        assert template["runAsUser"] > 0, name
        assert template["imageUser"], name  # where the uid comes from
        if "instance" in template["kinds"]:
            started = await platform.start_instance(account, _instance_body(template, spec))
            assert started.status_code == 202, (name, started.text)
            pod = await _pod(
                kube, namespace, f"gpucloud.io/instance={started.json()['instanceID']}"
            )
            _runs_restricted_as(pod, template["runAsUser"], name)
        if "service" in template["kinds"]:
            body = _service_body(template, spec)
            created = await platform.post_as_tenant(account, "/v1/inference-services", body)
            assert created.status_code == 201, (name, created.text)
            assert created.json()["port"] == template["servingPort"]
            assert created.json()["runAsUser"] == template["runAsUser"]
            pod = await _pod(kube, namespace, f"gpucloud.io/inference-service={body['serviceID']}")
            _runs_restricted_as(pod, template["runAsUser"], name)
            [container] = pod.spec.containers
            assert (container.command, container.args) == (template["command"], template["args"])


async def test_an_image_known_to_run_as_root_needs_a_user(platform: Platform) -> None:
    """Refused at admission, naming the field, rather than left never starting: the
    kubelet would refuse a root image under runAsNonRoot."""
    account = await platform.tenant(max_gpus=8, max_instances=8)
    spec = await platform.spec(gpus=1)
    vllm = next(
        t for t in (await platform.http.get("/v1/templates", headers=platform.admin)).json()
        if t["templateID"] == "vllm-openai"
    )  # fmt: skip
    other_tag = vllm["image"].rsplit(":", 1)[0] + ":v0.7.0"
    refused = await platform.start_instance(account, {"image": other_tag, "specName": spec})
    problem = assert_problem(refused, 422)
    assert "runs as root" in problem["detail"], problem
    assert problem["errors"][0]["loc"] == ["body", "template", "runAsUser"], problem
    for path, body in (
        ("/v1/jobs", {"image": other_tag, "specName": spec}),
        ("/v1/inference-services", {"serviceID": unique("root"), "image": other_tag,
                                    "specName": spec, "port": 8000}),
    ):  # fmt: skip
        refused = await platform.post_as_tenant(account, path, body)
        assert assert_problem(refused, 422)["errors"][0]["loc"] == ["body", "runAsUser"], path
        root = await platform.post_as_tenant(account, path, {**body, "runAsUser": 0})
        assert_problem(root, 422)
    # With a user it is admitted; an image not known to run as root needs none.
    allowed = await platform.start_instance(
        account, {"image": other_tag, "specName": spec, "template": {"runAsUser": 1000}}
    )
    assert allowed.status_code == 202, allowed.text
    plain = await platform.start_instance(account, {"image": "busybox", "specName": spec})
    assert plain.status_code == 202, plain.text


async def _pod(kube: k8s.ApiClient, namespace: str, selector: str) -> Any:
    async def made() -> Any:
        pods = await k8s.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector=selector)
        return pods.items[0] if pods.items else None

    return await eventually(made, timeout=30)


def _runs_restricted_as(pod: Any, uid: int, name: str) -> None:
    """PSA `restricted`'s pod and container rules, and the uid the kubelet checks."""
    security = pod.spec.security_context
    assert security.run_as_non_root is True, name
    assert security.run_as_user == uid, name
    assert security.seccomp_profile.type == "RuntimeDefault", name
    for container in pod.spec.containers:
        context = container.security_context
        assert context.allow_privilege_escalation is False, name
        assert context.capabilities.drop == ["ALL"], name
        assert not context.capabilities.add, name
        assert context.privileged in (None, False), name
        assert context.run_as_user in (None, uid), name
    for host_namespace in (pod.spec.host_network, pod.spec.host_pid, pod.spec.host_ipc):
        assert not host_namespace, name
    assert all(volume.host_path is None for volume in pod.spec.volumes or []), name


def _instance_body(template: dict[str, Any], spec: str) -> dict[str, Any]:
    command = [*(template["command"] or []), *(template["args"] or [])]
    ports = [
        {
            "port": p["port"],
            "isPublic": p["isPublic"],
            "isProbe": p["port"] == template["servingPort"],
        }
        for p in template["ports"]
    ]
    return {
        "image": template["image"],
        "specName": spec,
        "template": {
            "ports": ports,
            "envs": template["env"],
            "runAsUser": template["runAsUser"],
            **({"cmd": shlex.join(command)} if command else {}),
        },
    }


def _service_body(template: dict[str, Any], spec: str) -> dict[str, Any]:
    return {
        "serviceID": unique("tpl"),
        "image": template["image"],
        "specName": spec,
        "command": template["command"],
        "args": template["args"],
        "env": template["env"],
        "port": template["servingPort"],
        "readinessPath": template["readinessPath"],
        "runAsUser": template["runAsUser"],
    }
