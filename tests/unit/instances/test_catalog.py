"""The app catalog (templates/catalog.py): every template is a request the API would take,
pinned and runnable as non-root; and the image policy's refusal of images known to run
as root when no uid is given, wherever the request takes its uid."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from gpucloud_instances.schemas import ImageRef, is_device_selector
from gpucloud_instances.templates.catalog import CATALOG, ImagePolicy, Templates
from gpucloud_instances.templates.schemas import CatalogTemplate
from gpucloud_libs.errors import NotFound, ValidationFailed

IMAGE = TypeAdapter(ImageRef)
POLICY = ImagePolicy(())


@pytest.fixture(params=CATALOG, ids=lambda template: template.template_id)
def template(request: pytest.FixtureRequest) -> CatalogTemplate:
    chosen: CatalogTemplate = request.param
    return chosen


def test_each_listed_template_is_found_by_its_id() -> None:
    listed = Templates().list()
    ids = [template.template_id for template in listed]
    assert len(set(ids)) == len(ids)
    assert {"jupyter", "vllm-openai", "triton", "ssh-devbox"} <= set(ids)
    assert [Templates().get(template_id) for template_id in ids] == listed


def test_an_unknown_template_is_not_found_and_points_at_the_list() -> None:
    with pytest.raises(NotFound, match="GET /v1/templates"):
        Templates().get("comfyui")


def test_every_template_image_is_pinned_and_a_valid_reference(template: CatalogTemplate) -> None:
    assert IMAGE.validate_python(template.image) == template.image
    _, _, tag = template.image.rpartition(":")
    assert tag
    assert "/" not in tag
    assert tag != "latest"


def test_every_template_runs_as_a_non_root_uid(template: CatalogTemplate) -> None:
    assert template.run_as_user >= 1
    POLICY.admit(template.image, template.run_as_user, uid_field="template.runAsUser")


def test_every_template_env_is_the_tenants_to_set(template: CatalogTemplate) -> None:
    names = [env.name for env in template.env]
    assert len(set(names)) == len(names)
    assert not [name for name in names if is_device_selector(name)]


def test_a_servable_template_serves_on_one_of_its_public_http_ports(
    template: CatalogTemplate,
) -> None:
    ports = {port.port: port for port in template.ports}
    assert len(ports) == len(template.ports)
    if "service" not in template.kinds:
        return
    assert template.serving_port is not None
    assert template.readiness_path is not None
    assert template.readiness_path.startswith("/")
    serving = ports[template.serving_port]
    assert (serving.app_protocol, serving.is_public) == ("http", True)


def test_the_ssh_box_is_an_instance_reached_through_the_tunnel_only() -> None:
    box = Templates().get("ssh-devbox")
    assert box.kinds == ["instance"]
    [port] = box.ports
    assert (port.port, port.app_protocol, port.is_public) == (2222, "ssh", False)
    assert box.serving_port is None


@pytest.mark.parametrize(
    "image",
    ["vllm/vllm-openai:v0.6.3.post1", "vllm/vllm-openai:v0.7.0", "vllm/vllm-openai",
     "vllm/vllm-openai@sha256:" + "0" * 64, "nvcr.io/nvidia/tritonserver:25.01-py3",
     # Docker Hub under its other names: the same repository to the runtime.
     "docker.io/vllm/vllm-openai:v0.6.3.post1", "index.docker.io/vllm/vllm-openai:v0.6.3.post1",
     "registry-1.docker.io/vllm/vllm-openai"],
)  # fmt: skip
def test_a_root_image_of_the_catalog_needs_a_uid_at_any_tag_or_digest(image: str) -> None:
    with pytest.raises(ValidationFailed, match="runs as root") as refused:
        POLICY.admit(image, None, uid_field="runAsUser")
    assert refused.value.extensions["errors"][0]["loc"] == ["body", "runAsUser"]
    POLICY.admit(image, 1000, uid_field="runAsUser")


def test_the_refusal_names_the_uid_field_of_the_request_and_the_templates_uid() -> None:
    with pytest.raises(ValidationFailed) as refused:
        POLICY.admit(
            "lscr.io/linuxserver/openssh-server:latest", None, uid_field="template.runAsUser"
        )
    assert refused.value.extensions["errors"][0]["loc"] == ["body", "template", "runAsUser"]
    assert "'ssh-devbox' template uses 911" in refused.value.detail


def test_an_image_whose_own_user_is_not_root_starts_without_a_uid() -> None:
    POLICY.admit("quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07", None, uid_field="runAsUser")
    POLICY.admit("pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", None, uid_field="runAsUser")


def test_a_registry_port_is_not_mistaken_for_a_tag() -> None:
    """`host:5000/vllm/vllm-openai` is another repository than Docker Hub's vllm image."""
    POLICY.admit("registry.example.com:5000/vllm/vllm-openai", None, uid_field="runAsUser")


def test_the_allow_list_is_checked_before_the_user() -> None:
    only_nvcr = ImagePolicy(("nvcr.io",))
    with pytest.raises(ValidationFailed, match=r"images come from nvcr\.io") as refused:
        only_nvcr.admit("vllm/vllm-openai:v0.6.3.post1", None, uid_field="runAsUser")
    assert refused.value.extensions["errors"][0]["loc"] == ["body", "image"]
