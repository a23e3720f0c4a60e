"""Session fixtures over the real local stack: started here if it is not running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from minio import Minio
from playwright.async_api import Browser, async_playwright
from pymongo import AsyncMongoClient

from gpucloud_libs.identity import IdentitySigner
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_stack import browser as stack_browser

from .platform import Platform

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK = [sys.executable, str(REPO_ROOT / "deploy" / "local" / "stack.py")]


@pytest.fixture(scope="session")
def stack_env() -> dict[str, str]:
    """Bring the stack up (a no-op when it already runs) and return its connection settings."""
    up = subprocess.run([*STACK, "up"], capture_output=True, text=True, check=False)
    if up.returncode != 0:
        pytest.fail(f"the local stack did not come up:\n{up.stdout}\n{up.stderr}", pytrace=False)
    env = subprocess.run([*STACK, "env", "--json"], capture_output=True, text=True, check=True)
    settings: dict[str, str] = json.loads(env.stdout)
    os.environ.update(settings)
    return settings


def stack_service_env(service: str) -> dict[str, str]:
    """The settings `service` runs with in the local stack (its own keys and principal)."""
    done = subprocess.run(
        [*STACK, "env", "--json", "--service", service], capture_output=True, text=True, check=True
    )
    env: dict[str, str] = json.loads(done.stdout)
    return env


@pytest.fixture(scope="session")
def gateway_signer(stack_env: dict[str, str]) -> IdentitySigner:
    """Signs identities as the gateway does: for tests that call a service directly."""
    private_key = stack_service_env("gateway")["GPUCLOUD_IDENTITY_PRIVATE_KEY"]
    return IdentitySigner("gateway", private_key, setting="GPUCLOUD_IDENTITY_PRIVATE_KEY")


@pytest.fixture(scope="session")
def kafka(stack_env: dict[str, str]) -> KafkaConnection:
    """Kafka as the operator's admin principal, which may read and write every topic."""
    return KafkaConnection.from_env(stack_env)


@pytest.fixture(scope="session")
async def mongo(stack_env: dict[str, str]) -> AsyncIterator[AsyncMongoClient[dict[str, object]]]:
    mongo_client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        stack_env["GPUCLOUD_MONGODB_URI"], tz_aware=True
    )
    yield mongo_client
    await mongo_client.close()


@pytest.fixture(scope="session")
async def kube(stack_env: dict[str, str]) -> AsyncIterator[k8s.ApiClient]:
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=stack_env["GPUCLOUD_KUBECONFIG"], client_configuration=configuration
    )
    api = k8s.ApiClient(configuration)
    yield api
    await api.close()


@pytest.fixture(scope="session")
def s3_admin(stack_env: dict[str, str]) -> Minio:
    endpoint = urlparse(stack_env["GPUCLOUD_S3_ENDPOINT"])
    return Minio(
        endpoint.netloc,
        access_key=stack_env["GPUCLOUD_S3_ACCESS_KEY"],
        secret_key=stack_env["GPUCLOUD_S3_SECRET_KEY"],
        secure=False,
    )


@pytest.fixture
async def platform(stack_env: dict[str, str]) -> AsyncIterator[Platform]:
    """The public API through the gateway, as the bootstrap platform admin."""
    async with httpx.AsyncClient(base_url=stack_env["GPUCLOUD_GATEWAY_URL"], timeout=30) as http:
        client = Platform(http, stack_env["GPUCLOUD_BOOTSTRAP_ADMIN_KEY"])
        yield client
        await client.cleanup()


@pytest.fixture(scope="module")
async def chromium() -> AsyncIterator[Browser]:
    """Headless Chromium, as the stack provisions it, for a module's browser tests."""
    executable, libraries = stack_browser.chromium()
    env: dict[str, str | float | bool] = dict(libraries)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(executable), args=list(stack_browser.HEADLESS_ARGS), env=env
        )
        yield browser
        await browser.close()
