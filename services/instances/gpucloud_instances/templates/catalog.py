"""The app catalog: ready-made templates that instances and inference services start from.

A template is what a tenant would otherwise look up: the image, its ports and
which protocol each speaks, the readiness probe, the environment and the GPUs
it needs. It is data, kept here and served as it is; `tests/e2e/test_templates.py`
starts an instance and a service from every template, so each stays a request
the API accepts. Images are pinned, so a template means the same thing tomorrow.

Tenant pods run under Pod Security `restricted`, with runAsNonRoot: a kubelet starts
a container only as a non-zero uid, and an image whose own user is root (or a name)
needs `runAsUser`. Each template names the uid and where the image documents it, and
gives a root image's program a writable home and caches under /tmp.
"""

from __future__ import annotations

from gpucloud_libs.errors import NotFound, ValidationFailed

from ..schemas import DOCKER_HUB, EnvVar, image_registry
from .schemas import CatalogTemplate, SuggestedSpec, TemplatePort

#: A home a non-root user can write in the container's own /tmp, for images made to
#: run as root (whose home is /root).
HOME = "/tmp/home"  # noqa: S108 - the container's /tmp, not the host's
WRITABLE_HOME = (
    EnvVar(name="HOME", value=HOME),
    EnvVar(name="XDG_CACHE_HOME", value=f"{HOME}/.cache"),
    EnvVar(name="XDG_CONFIG_HOME", value=f"{HOME}/.config"),
)


def _vllm_caches() -> list[EnvVar]:
    """Where vLLM and the libraries under it write, beside HOME: torch's inductor reads
    the login name, which a uid the image does not know lacks."""
    return [
        EnvVar(name="USER", value="vllm"),
        EnvVar(name="HF_HOME", value=f"{HOME}/.cache/huggingface"),
        EnvVar(name="VLLM_CACHE_ROOT", value=f"{HOME}/.cache/vllm"),
        EnvVar(name="TRITON_CACHE_DIR", value=f"{HOME}/.triton"),
        EnvVar(name="NUMBA_CACHE_DIR", value=f"{HOME}/.cache/numba"),
        EnvVar(name="OUTLINES_CACHE_DIR", value=f"{HOME}/.cache/outlines"),
    ]


#: sshd as an unprivileged user: key login for that user only, nothing written
#: outside /tmp/sshd. PUBLIC_KEY holds the key the tenant gave.
SSHD_AS_USER = (
    'set -eu; d=/tmp/sshd; mkdir -p "$d"; chmod 700 "$d"; '
    "ssh-keygen -q -t ed25519 -N '' -f \"$d/host_key\"; "
    'printf \'%s\\n\' "$PUBLIC_KEY" > "$d/authorized_keys"; chmod 600 "$d/authorized_keys"; '
    'exec /usr/sbin/sshd.pam -D -e -p 2222 -h "$d/host_key" -o PidFile="$d/sshd.pid" '
    '-o AuthorizedKeysFile="$d/authorized_keys" -o StrictModes=no -o UsePAM=no '
    "-o PasswordAuthentication=no -o KbdInteractiveAuthentication=no"
)

CATALOG: tuple[CatalogTemplate, ...] = (
    CatalogTemplate(
        template_id="jupyter",
        name="JupyterLab with PyTorch",
        description=(
            "JupyterLab on the CUDA build of PyTorch. The gateway authenticates every "
            "request to the instance URL, so the notebook's own token is off."
        ),
        kinds=["instance"],
        image="quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
        command=["start-notebook.py"],
        args=["--IdentityProvider.token=", "--ServerApp.trust_xheaders=True"],
        env=[],
        ports=[TemplatePort(port=8888, app_protocol="http", is_public=True)],
        serving_port=8888,
        readiness_path="/api",
        suggested_specs=[SuggestedSpec(gpu_num=1, min_gpu_memory_gib=16)],
        run_as_user=1000,
        image_user=(
            "jovyan, uid 1000, home /home/jovyan: the image ends with `USER ${NB_UID}` "
            "(jupyter/docker-stacks, images/docker-stacks-foundation/Dockerfile)"
        ),
    ),
    CatalogTemplate(
        template_id="vllm-openai",
        name="OpenAI-compatible LLM server (vLLM)",
        description=(
            "vLLM's OpenAI-compatible server: /v1/chat/completions, /v1/completions and "
            "/v1/models, streaming tokens as server-sent events. Change the model in "
            "`args` (a Hugging Face id, or a path on a mounted volume); for a model over "
            "several GPUs add --tensor-parallel-size with the spec's GPU count."
        ),
        kinds=["instance", "service"],
        image="vllm/vllm-openai:v0.6.3.post1",
        command=["python3", "-m", "vllm.entrypoints.openai.api_server"],
        args=["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"],
        env=[EnvVar(name="VLLM_NO_USAGE_STATS", value="1"), *WRITABLE_HOME, *_vllm_caches()],
        ports=[TemplatePort(port=8000, app_protocol="http", is_public=True)],
        serving_port=8000,
        readiness_path="/health",
        suggested_specs=[
            SuggestedSpec(gpu_num=1, min_gpu_memory_gib=24, note="7-8B models in bf16"),
            SuggestedSpec(gpu_num=4, min_gpu_memory_gib=80, note="70B models in bf16"),
        ],
        run_as_user=1000,
        image_user=(
            "root: the vllm-openai stage of vllm's Dockerfile sets no USER and the image "
            "has no uid 1000; it runs as 1000 with HOME, USER and every cache under /tmp "
            "(vllm-project/vllm issue 10185: HOME=/tmp is the fix for an unknown uid)"
        ),
    ),
    CatalogTemplate(
        template_id="triton",
        name="NVIDIA Triton Inference Server",
        description=(
            "Triton serving the model repository at /models: HTTP/REST on 8000, gRPC on "
            "8001, Prometheus metrics on 8002. Through the service URL only HTTP is "
            "served for now; gRPC needs HTTP/2 end to end (docs/inference.md)."
        ),
        kinds=["instance", "service"],
        image="nvcr.io/nvidia/tritonserver:24.10-py3",
        command=["tritonserver"],
        args=["--model-repository=/models", "--http-port=8000", "--grpc-port=8001"],
        env=[*WRITABLE_HOME],
        ports=[
            TemplatePort(port=8000, app_protocol="http", is_public=True),
            TemplatePort(port=8001, app_protocol="grpc"),
            TemplatePort(port=8002, app_protocol="http"),
        ],
        serving_port=8000,
        readiness_path="/v2/health/ready",
        suggested_specs=[SuggestedSpec(gpu_num=1, min_gpu_memory_gib=16)],
        run_as_user=1000,
        image_user=(
            "root by default; the image ships triton-server, uid 1000, which owns "
            "/opt/tritonserver (triton-inference-server/server build.py; docs: "
            "customization_guide/deploy.md, 'Run as a Non-Root User')"
        ),
    ),
    CatalogTemplate(
        template_id="ssh-devbox",
        name="SSH dev box",
        description=(
            "A development box with an SSH server on 2222, run as the image's own user "
            "`abc` (uid 911) with no root step: give your public key and log in as abc. "
            "SSH is not HTTP: it is reached through `gpucloud ssh` (the gateway's "
            "authenticated tunnel), not through the instance URL."
        ),
        kinds=["instance"],
        image="lscr.io/linuxserver/openssh-server:9.7_p1-r4-ls170",
        # The image's s6 init changes users and files as root; this starts its sshd
        # directly, as sshd runs unprivileged: its own host key and authorized_keys in
        # a writable directory, key login only, for the user it runs as.
        command=["/bin/sh", "-c"],
        args=[SSHD_AS_USER],
        env=[EnvVar(name="PUBLIC_KEY", value="")],
        ports=[TemplatePort(port=2222, app_protocol="ssh")],
        serving_port=None,
        readiness_path=None,
        suggested_specs=[SuggestedSpec(gpu_num=1, min_gpu_memory_gib=0)],
        run_as_user=911,
        image_user=(
            "root for its s6 init, which runs sshd as abc, uid 911, shell /bin/bash "
            "(linuxserver/docker-baseimage-alpine: useradd -u 911 abc; "
            "docker-openssh-server: usermod --shell /bin/bash abc)"
        ),
    ),
)

_BY_ID = {template.template_id: template for template in CATALOG}


class Templates:
    def list(self) -> list[CatalogTemplate]:
        return list(CATALOG)

    def get(self, template_id: str) -> CatalogTemplate:
        found = _BY_ID.get(template_id)
        if found is None:
            raise NotFound(f"no template {template_id!r}; GET /v1/templates lists them")
        return found


#: Docker Hub under each name the runtime takes for it.
_HUB_NAMES = frozenset({DOCKER_HUB, "index.docker.io", "registry-1.docker.io"})


def _repository(image: str) -> str:
    """The repository an image reference names, as the runtime resolves it: without
    tag or digest, with its registry, and Docker Hub's spelled one way (`vllm/x`,
    `docker.io/vllm/x` and `index.docker.io/vllm/x` are one repository; a bare `x` is
    `library/x`)."""
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    name = name[:colon] if colon > slash else name
    registry = image_registry(name)
    first, _, rest = name.partition("/")
    path = rest if rest and first.lower() == registry else name
    if registry in _HUB_NAMES:
        registry = DOCKER_HUB
        path = path if "/" in path else f"library/{path}"
    return f"{registry}/{path}"


#: Catalog images whose own user is root, by repository: started without `runAsUser`
#: they would be refused by the kubelet and never run.
_ROOT_IMAGES = {_repository(t.image): t for t in CATALOG if t.image_user.startswith("root")}


def _refused(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(
        message,
        errors=[{"loc": ["body", *field.split(".")], "msg": message, "type": "value_error"}],
    )


class ImagePolicy:
    """What admission asks of a workload's image, beyond its form (schemas.ImageRef)."""

    def __init__(self, allowed_registries: tuple[str, ...]) -> None:
        self._allowed = frozenset(registry.lower() for registry in allowed_registries)

    def admit(self, image: str, run_as_user: int | None, *, uid_field: str) -> None:
        """Refuse an image from a registry the operator does not allow (when they list
        any, review M10), or one known to run as root with no uid: the kubelet would
        refuse it under runAsNonRoot and it would never start. `uid_field`: where the
        request takes the uid (`runAsUser`, `template.runAsUser`)."""
        registry = image_registry(image)
        if self._allowed and registry not in self._allowed:
            raise _refused(
                "image",
                f"images come from {', '.join(sorted(self._allowed))} on this platform, "
                f"not from {registry}",
            )
        template = _ROOT_IMAGES.get(_repository(image))
        if template is None or run_as_user is not None:
            return
        raise _refused(
            uid_field,
            f"{image} runs as root, which tenant pods may not: set {uid_field} to a non-zero "
            f"uid (the {template.template_id!r} template uses {template.run_as_user})",
        )
