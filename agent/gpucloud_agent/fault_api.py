"""The simulator's own small API: inject and clear faults (demo, tests, chaos drills)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, FastAPI, Header
from pydantic import Field

from gpucloud_libs.errors import NotFound, Unauthenticated
from gpucloud_libs.http import ApiModel, install_error_handlers
from gpucloud_libs.identity import secrets_equal

from .simulated import Fault, SimulatedFleet


class FaultRequest(ApiModel):
    node: str
    gpu: int = Field(ge=0)
    fault: Fault


def control_app(fleet: SimulatedFleet, token: str) -> FastAPI:
    """The simulator's own small API: inject and clear faults (demo, tests, chaos drills).
    A fault looks like a broken GPU to the whole platform (alerts, quarantine, refunds),
    so changing one takes the operator's `GPUCLOUD_SIMULATOR_TOKEN` as a bearer token."""
    app = FastAPI(title="gpucloud GPU simulator")

    def operator(authorization: Annotated[str, Header()] = "") -> None:
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not secrets_equal(presented, token):
            raise Unauthenticated("send the simulator token as `Authorization: Bearer <token>`")

    @app.get("/healthz")
    async def healthz() -> dict[str, object]:
        return {"status": "ok", "nodes": len(fleet.nodes)}

    @app.post("/faults", status_code=204, dependencies=[Depends(operator)])
    async def inject(body: FaultRequest) -> None:
        if body.node not in fleet.nodes or body.gpu >= fleet.nodes[body.node].gpu_count:
            raise NotFound(f"no simulated GPU {body.gpu} on node {body.node!r}")
        fleet.inject(body.node, body.gpu, body.fault)

    @app.delete("/faults/{node}", status_code=204, dependencies=[Depends(operator)])
    async def clear(node: str) -> None:
        fleet.clear(node)

    install_error_handlers(app)
    return app
