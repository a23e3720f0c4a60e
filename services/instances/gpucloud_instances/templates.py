"""The app catalog: ready-made templates that instances and inference services start from.

A template is what a tenant would otherwise look up: the image, its ports and
which protocol each speaks, the readiness probe, the environment and the GPUs
it needs. It is data, kept here and served as it is; `tests/test_templates.py`
starts an instance and a service from every template, so each stays a request
the API accepts. Images are pinned, so a template means the same thing tomorrow.
"""

from __future__ import annotations

from gpucloud_libs.errors import NotFound

from .schemas import CatalogTemplate, EnvVar, SuggestedSpec, TemplatePort

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
        env=[EnvVar(name="VLLM_NO_USAGE_STATS", value="1")],
        ports=[TemplatePort(port=8000, app_protocol="http", is_public=True)],
        serving_port=8000,
        readiness_path="/health",
        suggested_specs=[
            SuggestedSpec(gpu_num=1, min_gpu_memory_gib=24, note="7-8B models in bf16"),
            SuggestedSpec(gpu_num=4, min_gpu_memory_gib=80, note="70B models in bf16"),
        ],
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
        env=[],
        ports=[
            TemplatePort(port=8000, app_protocol="http", is_public=True),
            TemplatePort(port=8001, app_protocol="grpc"),
            TemplatePort(port=8002, app_protocol="http"),
        ],
        serving_port=8000,
        readiness_path="/v2/health/ready",
        suggested_specs=[SuggestedSpec(gpu_num=1, min_gpu_memory_gib=16)],
    ),
    CatalogTemplate(
        template_id="ssh-devbox",
        name="SSH dev box",
        description=(
            "A plain CUDA development box with an SSH server on 2222. Put your public "
            "key in PUBLIC_KEY. SSH is not HTTP: it is reached through `gpucloud ssh` "
            "(the gateway's authenticated tunnel), not through the instance URL."
        ),
        kinds=["instance"],
        image="lscr.io/linuxserver/openssh-server:9.7_p1-r4-ls170",
        command=None,
        args=None,
        env=[
            EnvVar(name="PUBLIC_KEY", value=""),
            EnvVar(name="USER_NAME", value="dev"),
            EnvVar(name="PASSWORD_ACCESS", value="false"),
        ],
        ports=[TemplatePort(port=2222, app_protocol="ssh")],
        serving_port=None,
        readiness_path=None,
        suggested_specs=[SuggestedSpec(gpu_num=1, min_gpu_memory_gib=0)],
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
