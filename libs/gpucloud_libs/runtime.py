"""The parts every service wires the same way: logs, traces, Kafka, MongoDB, HTTP.

A service builds one `ServiceRuntime` in its app.py, registers its Kafka
handlers and routers on it, and gets a FastAPI app whose lifespan connects and
disconnects everything. /healthz says the process is alive; /readyz checks the
real dependencies and answers 503 with the failing ones.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from faststream.kafka import KafkaBroker
from pymongo import AsyncMongoClient

from .http import BodyLimitMiddleware, RejectNulMiddleware, install_error_handlers
from .identity import IdentitySigner, IdentityVerifier, require_strong_key
from .kafka import (
    BatchHandler,
    EventHandler,
    create_broker,
    subscribe_event_batches,
    subscribe_events,
)
from .kafka_access import ServiceAccess
from .logs import setup_logging
from .mongo import Database, Document, IndexPlan, create_client, ensure_indexes, ping
from .server_timing import ServerTimingMiddleware
from .settings import ServiceSettings
from .telemetry import Telemetry, TracingMiddleware, setup_telemetry
from .topics import TopicSpec, dead_letter_topic, require_topics

#: An event, or a batch of them, as a consumer hands it to its handler.
_Event = TypeVar("_Event")

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[None]]
Hook = Callable[[], Awaitable[None]]

READINESS_TIMEOUT_S = 3.0
#: Headers a reverse proxy (the ingress, the gateway) adds to what it forwards.
PROXIED_BY = frozenset({"x-forwarded-for", "forwarded", "x-real-ip"})


class ServiceRuntime:
    def __init__(
        self,
        settings: ServiceSettings,
        *,
        kafka_access: ServiceAccess,
        indexes: IndexPlan | None = None,
    ) -> None:
        self.settings = settings
        self.identity_verifier = IdentityVerifier(
            settings.identity_public_keys,
            setting="GPUCLOUD_IDENTITY_PUBLIC_KEYS",
            audience=settings.service_name,
        )
        #: Checked first at start, before connecting anywhere: keys and secrets.
        self._key_checks: list[Callable[[], None]] = [self.identity_verifier.check]
        if settings.kafka_username:  # a guessable password is no principal (review L3)
            kafka_password = settings.kafka_password.get_secret_value()
            self.check_key_at_start(
                lambda: require_strong_key(kafka_password, setting="GPUCLOUD_KAFKA_PASSWORD")
            )
        self.name = settings.service_name
        self.source = f"/gpucloud/{self.name}"
        setup_logging(self.name, settings.log_level)
        self.telemetry: Telemetry = setup_telemetry(self.name, settings.otlp_endpoint)
        self.broker: KafkaBroker = create_broker(
            settings.kafka,
            client_id=f"gpucloud-{self.name}",
            tracer_provider=self.telemetry.tracer_provider,
        )
        self.mongo: AsyncMongoClient[Document] = create_client(
            settings.mongodb_uri, app_name=f"gpucloud-{self.name}"
        )
        self.db: Database = self.mongo[settings.database_name]
        self._indexes = indexes or {}
        #: What the service's Kafka principal may touch (gpucloud_libs.kafka_access).
        self.kafka_access = kafka_access
        #: `gpucloud-<service>`; a renamed copy (a benchmark's) gets a group of its own.
        self.consumer_group = f"gpucloud-{self.name}"
        self._checks: dict[str, ReadinessCheck] = {
            "mongodb": lambda: ping(self.db),
            "kafka": self._kafka_ready,
        }
        self._on_start: list[Hook] = []
        #: Set once the `on_start` hooks have run: consumers hold deliveries until then.
        self._started = asyncio.Event()
        self._on_stop: list[Hook] = []
        self._periodic: list[tuple[float, Callable[[], Awaitable[object]], str]] = []
        self._loops: list[asyncio.Task[None]] = []

    async def _kafka_ready(self) -> None:
        if not await self.broker.ping(timeout=READINESS_TIMEOUT_S):
            raise ConnectionError("broker did not answer")

    def _consumable(self, topic: TopicSpec) -> str:
        """The service's consumer group, once `topic` is one its principal may read."""
        if topic not in self.kafka_access.consumes:
            raise ValueError(
                f"{self.name} may not consume {topic.name}: add it to its entry in kafka_access"
            )
        return self.consumer_group

    def _kafka_topics(self) -> list[TopicSpec]:
        dead_letters = (
            [dead_letter_topic(self.consumer_group)] if self.kafka_access.consumes else []
        )
        return [*self.kafka_access.produces, *self.kafka_access.consumes, *dead_letters]

    def subscribe(self, topic: TopicSpec, handler: EventHandler) -> None:
        """Consume `topic` with `handler`, as the service's consumer group, once the
        `on_start` hooks have run."""
        subscribe_events(
            self.broker, topic, group=self._consumable(topic), handler=self._once_started(handler)
        )

    def subscribe_batches(self, topic: TopicSpec, handler: BatchHandler) -> None:
        """Consume `topic` a batch at a time (see `subscribe_event_batches`), once the
        `on_start` hooks have run."""
        subscribe_event_batches(
            self.broker, topic, group=self._consumable(topic), handler=self._once_started(handler)
        )

    def _once_started(
        self, handler: Callable[[_Event], Awaitable[None]]
    ) -> Callable[[_Event], Awaitable[None]]:
        """`handler`, holding each delivery until the service has started. The broker
        starts its consumers with its publisher, before the hooks that fill what the
        handlers read (a restore from the store, a connection): a message held here
        is not acknowledged, so nothing is lost if the start fails."""

        async def handle(event: _Event) -> None:
            await self._started.wait()
            await handler(event)

        return handle

    def identity_signer(self) -> IdentitySigner:
        """This service's signer, for the calls it makes to other services as a caller;
        its key is checked at start like the others."""
        signer = IdentitySigner(
            self.kafka_access.service,
            self.settings.identity_private_key.get_secret_value(),
            setting="GPUCLOUD_IDENTITY_PRIVATE_KEY",
        )
        self.check_key_at_start(signer.check)
        return signer

    def check_key_at_start(self, check: Callable[[], None]) -> None:
        """`check` runs before anything connects; a WeakKey from it stops the service."""
        self._key_checks.append(check)

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    def on_start(self, hook: Hook) -> None:
        self._on_start.append(hook)

    def on_stop(self, hook: Hook) -> None:
        self._on_stop.append(hook)

    def every(self, interval_s: float, work: Callable[[], Awaitable[object]], name: str) -> None:
        """Run `work` every `interval_s` while the service runs; a failure waits a round."""
        self._periodic.append((interval_s, work, name))

    async def _start_periodic(self) -> None:
        async def loop(interval_s: float, work: Callable[[], Awaitable[object]], name: str) -> None:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    await work()
                except Exception:
                    log.warning(
                        "periodic work failed; next round retries",
                        extra={"work": name},
                        exc_info=True,
                    )

        for interval_s, work, name in self._periodic:
            self._loops.append(asyncio.create_task(loop(interval_s, work, name), name=name))

    async def _stop_periodic(self) -> None:
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops.clear()

    async def readiness(self) -> dict[str, str]:
        async def run(check: ReadinessCheck) -> str:
            try:
                await asyncio.wait_for(check(), READINESS_TIMEOUT_S)
            except Exception as error:  # any failure means not ready; say which
                return f"failed: {type(error).__name__}: {error}"[:300]
            return "ok"

        names = list(self._checks)
        results = await asyncio.gather(*(run(self._checks[name]) for name in names))
        return dict(zip(names, results, strict=True))

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        # First, before connecting anywhere: a guessable key would let anyone act as anyone.
        for check in self._key_checks:
            check()
        await require_topics(self.settings.kafka, self._kafka_topics())
        await ensure_indexes(self.db, self._indexes)
        await self.broker.start()  # its publisher first: hooks may publish
        for hook in self._on_start:
            await hook()
        self._started.set()
        await self._start_periodic()
        log.info("service started", extra={"port": self.settings.http_port})
        try:
            yield
        finally:
            await self._stop_periodic()
            for hook in reversed(self._on_stop):
                await hook()
            await self.broker.stop()
            await self.mongo.close()
            self.telemetry.shutdown()

    def create_app(
        self,
        *,
        title: str,
        description: str,
        routers: list[APIRouter],
        parts: Iterable[object] = (),
    ) -> FastAPI:
        """The service's app; `parts` are what its routes take through `http.app_part`."""
        app = FastAPI(title=title, description=description, version="0.1.0", lifespan=self.lifespan)
        app.state.parts = {type(part): part for part in parts}
        install_error_handlers(app)
        app.state.identity_verifier = self.identity_verifier
        app.add_middleware(BodyLimitMiddleware, max_bytes=self.settings.max_body_bytes)
        app.add_middleware(RejectNulMiddleware)
        app.add_middleware(ServerTimingMiddleware)
        app.add_middleware(TracingMiddleware, service=self.name)

        @app.get("/healthz", tags=["health"], summary="Liveness: the process is up")
        async def healthz() -> dict[str, str]:
            return {"status": "ok"}

        @app.get(
            "/readyz",
            tags=["health"],
            summary="Readiness: every dependency answers",
            responses={503: {"description": "At least one dependency failed"}},
        )
        async def readyz(request: Request) -> JSONResponse:
            checks = await self.readiness()
            ready = all(result == "ok" for result in checks.values())
            body: dict[str, Any] = {"status": "ready" if ready else "not_ready"}
            # Which dependency failed, and how, names internal hosts: it is for the
            # probes and operators that call the app directly, never through a proxy
            # (which adds a forwarding header the caller cannot strip).
            if not PROXIED_BY.intersection(request.headers.keys()):
                body["checks"] = checks
            return JSONResponse(body, status_code=200 if ready else 503)

        for router in routers:
            app.include_router(router)
        return app


#: How long a service keeps an idle client connection open. It must outlast every
#: client's own idle expiry (httpx 5 s, aiohttp 15 s, an ingress's upstream pool 60 s):
#: when both sides give up at the same moment, the client sends a request down a
#: connection the server is closing, and gets no answer (uvicorn's default is 5 s,
#: exactly httpx's).
KEEP_ALIVE_S = 75


def serve(app: FastAPI, settings: ServiceSettings, *, ws_max_size: int = 2**20) -> None:
    """Run `app` under uvicorn; the entry point of each service's __main__.

    Settings come from the environment alone; the command line only answers --help.
    `ws_max_size`: the largest WebSocket message a client may send (1009 past it).
    """
    argparse.ArgumentParser(
        prog=f"python -m gpucloud_{settings.service_name}",
        description=f"Runs the gpucloud {settings.service_name} service: {app.description}",
        epilog=f"Configured by environment variables ({settings.model_config.get('env_prefix', '')}*); "
        f"it listens on {settings.http_host}:{settings.http_port}.",
    ).parse_args()
    uvicorn.run(
        app,
        host=settings.http_host,
        port=settings.http_port,
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,  # no banner naming the server and its version
        ws_max_size=ws_max_size,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
