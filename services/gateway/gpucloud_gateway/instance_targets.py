"""Where an instance or inference-service host leads, for one caller: the instances
service says (as that caller), the egress policy agrees, and the answer is kept a
moment. Used by the URL proxy (instance_urls.py) and the tunnels (tunnels.py)."""

from __future__ import annotations

import json
from urllib.parse import quote

from gpucloud_libs.errors import DependencyUnavailable, Forbidden, GpucloudError, NotFound
from gpucloud_libs.identity import IdentitySigner
from gpucloud_libs.naming import parse_instance_host, parse_service_host

from .authorization import InsufficientScope
from .cache import TtlCache
from .forwarding import exact_url, identity_headers, relay
from .schemas import Principal
from .settings import GatewaySettings
from .upstream import Headers, Upstream, UpstreamUnreachable


class InstanceUnreachable(GpucloudError):
    status = 502
    code = "instance_unreachable"
    title = "The instance did not answer"


class RelayedProblem(Exception):
    """The instances service refused; its problem document goes to the caller as is."""

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        super().__init__(status)
        self.response = relay(status, headers, body)


def no_longer_served(problem: RelayedProblem, port: int) -> GpucloudError:
    """The instances service's answer to an open connection's recheck: the instance is
    gone (a 4xx), or it could not say (a 5xx: an outage, not a refusal)."""
    if problem.response.status_code >= 500:
        return DependencyUnavailable("the instances service could not say where the instance is")
    return NotFound(f"the instance no longer serves port {port}")


def require_connect(principal: Principal) -> None:
    """Opening an instance's or a service's URL, or its session link, takes this scope."""
    if "instances:connect" not in principal.scopes:
        raise InsufficientScope("this credential lacks the scope 'instances:connect'")


#: A caller's view of the tenant's projects (decision 142); None: all of them.
ProjectsSeen = tuple[str, ...] | None


class InstanceTargets:
    def __init__(
        self, settings: GatewaySettings, upstream: Upstream, signer: IdentitySigner
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.signer = signer
        self.egress = settings.egress
        self._addresses = TtlCache[tuple[str, ProjectsSeen, str, int, bool], str](
            settings.endpoint_cache_ttl_s, max_entries=10_000
        )
        self._replicas = TtlCache[tuple[str, ProjectsSeen, str], tuple[list[str], int]](
            settings.service_endpoints_ttl_s, max_entries=10_000
        )

    async def instance(self, principal: Principal, host: str) -> tuple[str, int, str]:
        """(instance id, port, address) of an instance host, for the caller's tenant only."""
        parsed = (
            parse_instance_host(host, principal.tenant_id, self.settings.instance_domain)
            if principal.tenant_id
            else None
        )
        if parsed is None or principal.service_ids is not None:
            # A machine key of inference services opens no instance.
            raise NotFound(f"no instance of yours answers at {host}")
        require_connect(principal)
        instance_id, port = parsed
        return instance_id, port, await self.address(principal, instance_id, port)

    async def address(
        self, principal: Principal, instance_id: str, port: int, *, tunnel: bool = False
    ) -> str:
        """The pod address behind one port of the caller's running instance (kept a few
        seconds): a public port for its URL, any declared TCP port for a tunnel."""

        async def resolve(_: tuple[str, ProjectsSeen, str, int, bool]) -> str:
            path = f"/gpu-instances/{quote(instance_id)}/endpoints/{port}"
            query = "tunnel=true" if tunnel else ""
            address = str((await self.instances_call(principal, path, query))["address"])
            self.egress.check(address, f"instance {instance_id}")
            return address

        # The projects seen too: the instances service answers a caller for the work of
        # its projects alone (decision 142), so a cached answer is for callers who see
        # the same ones.
        key = (principal.tenant_id or "", principal.projects, instance_id, port, tunnel)
        return await self._addresses.get(key, resolve)

    def service_of(self, principal: Principal, host: str) -> str | None:
        """The service id of a service host of the caller's tenant, else None."""
        if principal.tenant_id is None:
            return None
        service_id = parse_service_host(host, principal.tenant_id, self.settings.instance_domain)
        if service_id is None:
            return None
        require_connect(principal)
        if principal.service_ids is not None and service_id not in principal.service_ids:
            raise Forbidden(
                f"this key calls the inference services {principal.service_ids} only",
                service_ids=principal.service_ids,
            )
        return service_id

    async def serving_replicas(
        self, principal: Principal, service_id: str, *, fresh: bool = False
    ) -> tuple[list[str], int]:
        """(addresses, port) of the service's serving replicas, a second old at most."""
        key = (principal.tenant_id or "", principal.projects, service_id)
        if fresh:
            self._replicas.forget(key)

        async def resolve(_: tuple[str, ProjectsSeen, str]) -> tuple[list[str], int]:
            path = f"/inference-services/{quote(service_id)}/endpoints"
            body = await self.instances_call(principal, path)
            addresses, port = body.get("addresses"), body.get("port")
            if not isinstance(addresses, list) or not isinstance(port, int):
                raise InstanceUnreachable("the instances service answered without endpoints")
            for address in addresses:
                self.egress.check(str(address), f"a replica of service {service_id}")
            return [str(address) for address in addresses], port

        return await self._replicas.get(key, resolve)

    async def instances_call(
        self, principal: Principal, path: str, query: str = ""
    ) -> dict[str, object]:
        """GET `path` (with `query`, without its `?`) of the instances service, as the caller."""
        headers = identity_headers(
            self.signer, principal, service="instances", method="GET", path=path, query=query
        )
        try:
            response = await self.upstream.call(
                "GET",
                exact_url(f"{self.settings.instances_url}{path}", query),
                headers=headers,
            )
        except UpstreamUnreachable as error:
            raise InstanceUnreachable("the instances service did not answer; try again") from error
        if response.status != 200:
            raise RelayedProblem(response.status, response.headers, response.body)
        body: dict[str, object] = json.loads(response.body)
        return body
