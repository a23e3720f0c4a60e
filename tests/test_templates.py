"""The app catalog: every template starts what it says it starts, as the API takes it."""

from __future__ import annotations

import shlex
from typing import Any

from .platform import Platform, assert_problem, bearer
from .support import unique


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
    platform: Platform,
) -> None:
    account = await platform.tenant(max_gpus=16, max_instances=16)
    spec = await platform.spec(gpus=1)
    for template in (await platform.http.get("/v1/templates", headers=platform.admin)).json():
        if "instance" in template["kinds"]:
            started = await platform.start_instance(account, _instance_body(template, spec))
            assert started.status_code == 202, (template["templateID"], started.text)
        if "service" in template["kinds"]:
            created = await platform.post_as_tenant(
                account, "/v1/inference-services", _service_body(template, spec)
            )
            assert created.status_code == 201, (template["templateID"], created.text)
            assert created.json()["port"] == template["servingPort"]


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
    }
