"""The simulator's fault API, served in-process: a fault changes only with the
operator's token, only on a GPU the fleet has, and only as one of the four faults;
clearing a node heals its GPUs (fault_api.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from gpucloud_agent.fault_api import control_app
from gpucloud_agent.simulated import SimulatedFleet

AT = datetime(2026, 11, 27, tzinfo=UTC)
TOKEN = "sim-token-0123456789abcdef0123456789"
OPERATOR = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def fleet() -> SimulatedFleet:
    made = SimulatedFleet(seed=1)
    made.set_node("n1", "NVIDIA-H100-80GB-HBM3", 2)
    return made


@pytest.fixture
async def api(fleet: SimulatedFleet) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=control_app(fleet, TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://simulator") as client:
        yield client


async def test_health_says_how_many_nodes_are_simulated(api: httpx.AsyncClient) -> None:
    answer = await api.get("/healthz")
    assert (answer.status_code, answer.json()) == (200, {"status": "ok", "nodes": 1})


async def test_the_operator_injects_a_fault_on_a_gpu(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    answer = await api.post("/faults", json={"node": "n1", "gpu": 1, "fault": "overheat"},
                            headers=OPERATOR)  # fmt: skip
    assert answer.status_code == 204
    hot = fleet.sample("n1", AT)[1]
    assert hot.temperature_c >= 93


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
     {"Authorization": f"Basic {TOKEN}"}],
)  # fmt: skip
async def test_a_fault_without_the_operators_bearer_token_is_refused(
    api: httpx.AsyncClient, fleet: SimulatedFleet, headers: dict[str, str]
) -> None:
    answer = await api.post("/faults", json={"node": "n1", "gpu": 0, "fault": "ecc"},
                            headers=headers)  # fmt: skip
    assert answer.status_code == 401
    assert answer.json()["code"] == "unauthenticated"
    assert fleet.sample("n1", AT)[0].ecc_uncorrected == 0


async def test_the_bearer_scheme_is_read_in_any_case(api: httpx.AsyncClient) -> None:
    answer = await api.post("/faults", json={"node": "n1", "gpu": 0, "fault": "idle"},
                            headers={"Authorization": f"bearer {TOKEN}"})  # fmt: skip
    assert answer.status_code == 204


@pytest.mark.parametrize(("node", "index"), [("n1", 2), ("n9", 0)])
async def test_a_gpu_the_fleet_does_not_have_is_not_found(
    api: httpx.AsyncClient, node: str, index: int
) -> None:
    answer = await api.post("/faults", json={"node": node, "gpu": index, "fault": "ecc"},
                            headers=OPERATOR)  # fmt: skip
    assert answer.status_code == 404
    assert answer.json()["detail"] == f"no simulated GPU {index} on node {node!r}"


async def test_an_unknown_fault_or_a_negative_gpu_is_named_in_a_422(api: httpx.AsyncClient) -> None:
    answer = await api.post("/faults", json={"node": "n1", "gpu": -1, "fault": "melt"},
                            headers=OPERATOR)  # fmt: skip
    assert answer.status_code == 422
    assert sorted(tuple(error["loc"]) for error in answer.json()["errors"]) == [
        ("body", "fault"), ("body", "gpu"),
    ]  # fmt: skip


async def test_clearing_a_node_heals_every_gpu_and_needs_the_token(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    fleet.inject("n1", 0, "overheat")
    fleet.inject("n1", 1, "overheat")
    assert (await api.delete("/faults/n1")).status_code == 401
    assert (await api.delete("/faults/n1", headers=OPERATOR)).status_code == 204
    assert [s.throttle_reasons for s in fleet.sample("n1", AT)] == [0, 0]
