"""The one boundary to Kubernetes: only this module imports kubernetes_asyncio.

Used by the instances service (pods, namespaces, quotas) and the storage
service (volume claims, the Secrets that carry storage credentials).

Objects go in and come out as plain JSON dicts (camelCase, as the API serves
them), and failures come out as this module's errors, so no library type
crosses into the rest of the service.
"""

from __future__ import annotations

import functools
import json
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from gpucloud_libs.errors import DependencyUnavailable

Manifest = dict[str, Any]

REQUEST_TIMEOUT_S = 10
#: A watch event carries a whole object, up to etcd's 1.5 MiB request limit: more
#: than aiohttp's default read buffer (the library's own session uses the same).
READ_BUFFER_BYTES = 2**21


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(KubeError):
    pass


class ConflictError(KubeError):
    """The object already exists, or a write lost an optimistic-concurrency race."""


class QuotaRejectedError(KubeError):
    """Admission refused the object because the namespace's ResourceQuota is exhausted."""


class GoneError(KubeError):
    """A watch's resourceVersion is too old: relist, then watch again."""


class _RawWatch(watch.Watch):
    """A watch that leaves each object as the API server's JSON: callers read
    `raw_object` only, and building the library's model for every event (each node
    heartbeat of a large fleet included) is most of a watch's CPU."""

    def get_return_type(self, func: object) -> str:
        return ""


def _error(error: ApiException) -> KubeError:
    message = f"{error.status} {error.reason}: {getattr(error, 'body', '')}"[:1000]
    if error.status == 404:
        return NotFoundError(message, 404)
    if error.status == 409:
        return ConflictError(message, 409)
    if error.status == 410:
        return GoneError(message, 410)
    if error.status == 403 and "exceeded quota" in str(getattr(error, "body", "")):
        return QuotaRejectedError(message, 403)
    return KubeError(message, error.status)


def _failed(status: int, reason: str, body: bytes) -> KubeError:
    """The project's error for an answer outside 2xx, read raw (no library models)."""
    failed: Any = ApiException(status=status, reason=reason)  # its stub types body as bytes
    failed.body = body.decode(errors="replace")
    return _error(failed)


# kind -> (API class, snake-case resource name, namespaced)
_KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("CoreV1Api", "namespace", False),
    "Node": ("CoreV1Api", "node", False),
    "Pod": ("CoreV1Api", "pod", True),
    "Service": ("CoreV1Api", "service", True),
    "ResourceQuota": ("CoreV1Api", "resource_quota", True),
    "LimitRange": ("CoreV1Api", "limit_range", True),
    "Event": ("CoreV1Api", "event", True),
    "NetworkPolicy": ("NetworkingV1Api", "network_policy", True),
    "Ingress": ("NetworkingV1Api", "ingress", True),
    "PriorityClass": ("SchedulingV1Api", "priority_class", False),
    "Lease": ("CoordinationV1Api", "lease", True),
    "Job": ("BatchV1Api", "job", True),
    "Deployment": ("AppsV1Api", "deployment", True),
    "RoleBinding": ("RbacAuthorizationV1Api", "role_binding", True),
    "ServiceAccount": ("CoreV1Api", "service_account", True),
    "PersistentVolumeClaim": ("CoreV1Api", "persistent_volume_claim", True),
    "PersistentVolume": ("CoreV1Api", "persistent_volume", False),
    "Secret": ("CoreV1Api", "secret", True),
    "StorageClass": ("StorageV1Api", "storage_class", False),
    "TokenReview": ("AuthenticationV1Api", "token_review", False),
    "SelfSubjectRulesReview": ("AuthorizationV1Api", "self_subject_rules_review", False),
}


#: Custom resources: kind -> (group, version, plural), all namespaced.
_CUSTOM_KINDS: dict[str, tuple[str, str, str]] = {
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
}
_CUSTOM_VERBS = {
    "create": "create_namespaced_custom_object",
    "read": "get_namespaced_custom_object",
    "patch": "patch_namespaced_custom_object",
    "replace": "replace_namespaced_custom_object",
    "delete": "delete_namespaced_custom_object",
}


def _env_proxy(server: str | None) -> str | None:
    """The proxy the environment (HTTPS_PROXY, NO_PROXY, ...) names for the API server."""
    url = urllib.parse.urlsplit(server or "")
    if url.hostname is None or urllib.request.proxy_bypass(url.hostname):
        return None
    return urllib.request.getproxies().get(url.scheme)


def _skip_per_request_env_lookups(api: client.ApiClient) -> None:
    """The library's HTTP session trusts the environment, so aiohttp looks up netrc
    and the proxy variables in a worker thread on every call: two thread hops, about
    a tenth of the instances service's CPU under a burst of starts. The proxy is
    looked up once instead (`_env_proxy`), and the API server's credentials come
    from the kubeconfig, never from netrc. The session is swapped for one on the
    same connection pool."""
    rest = api.rest_client
    trusting: aiohttp.ClientSession = rest.pool_manager
    connector = trusting.connector
    trusting.detach()
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=READ_BUFFER_BYTES
    )


class KubeClient:
    """Connects on service start (kubeconfig path, or in-cluster when none is given;
    a registered cluster's from its kubeconfig, parsed: `config_dict`)."""

    def __init__(
        self, kubeconfig: str | None, *, config_dict: dict[str, Any] | None = None
    ) -> None:
        self._kubeconfig = kubeconfig
        self._config_dict = config_dict
        self._api: client.ApiClient | None = None
        self._apis: dict[str, Any] = {}

    async def connect(self) -> None:
        configuration = client.Configuration()
        if self._config_dict is not None:
            await config.load_kube_config_from_dict(
                self._config_dict, client_configuration=configuration
            )
        elif self._kubeconfig:
            await config.load_kube_config(
                config_file=self._kubeconfig, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.connection_pool_maxsize = 64
        if configuration.proxy is None:
            configuration.proxy = _env_proxy(configuration.host)
        self._api = client.ApiClient(configuration)
        _skip_per_request_env_lookups(self._api)
        self._apis = {}

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    @property
    def api(self) -> client.ApiClient:
        if self._api is None:
            raise DependencyUnavailable("Kubernetes client is not connected yet")
        return self._api

    def _method(self, kind: str, verb: str, subresource: str = "") -> tuple[Any, bool]:
        if kind in _CUSTOM_KINDS:
            return self._custom_method(kind, verb), True
        api_class, resource, namespaced = _KINDS[kind]
        if api_class not in self._apis:
            self._apis[api_class] = getattr(client, api_class)(self.api)
        scope = "namespaced_" if namespaced else ""
        if verb == "list" and namespaced:
            scope = ""
            resource = f"{resource}_for_all_namespaces"
        suffix = f"_{subresource}" if subresource else ""
        return getattr(self._apis[api_class], f"{verb}_{scope}{resource}{suffix}"), namespaced

    def _custom_method(self, kind: str, verb: str) -> Any:
        """A CustomObjectsApi call taking the arguments the built-in kinds' calls take:
        (namespace, body) to create, (name, namespace[, body]) otherwise."""
        group, version, plural = _CUSTOM_KINDS[kind]
        if "CustomObjectsApi" not in self._apis:
            self._apis["CustomObjectsApi"] = client.CustomObjectsApi(self.api)
        api = self._apis["CustomObjectsApi"]
        if verb == "list":
            return functools.partial(api.list_cluster_custom_object, group, version, plural)
        method = getattr(api, _CUSTOM_VERBS[verb])

        def call(*args: Any, **kwargs: Any) -> Any:
            if verb == "create":
                namespace, body = args
                return method(group, version, namespace, plural, body, **kwargs)
            name, namespace, *rest = args
            return method(group, version, namespace, plural, name, *rest, **kwargs)

        return call

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the API and return the server's JSON as it came. The library's models
        are skipped: building one per answer, and JSON again from it, was most of
        the CPU of a call."""
        try:
            response = await method(
                *args, _request_timeout=REQUEST_TIMEOUT_S, _preload_content=False, **kwargs
            )
            try:
                data = await response.read()
            finally:
                response.release()
        except ApiException as error:
            raise _error(error) from error
        except (TimeoutError, OSError) as error:
            raise DependencyUnavailable(f"Kubernetes API unreachable: {error}") from error
        if not 200 <= response.status <= 299:
            raise _failed(response.status, response.reason, data)
        return json.loads(data) if data else {}

    async def server_version(self) -> str:
        info = await self._call(client.VersionApi(self.api).get_code)
        return str(info["gitVersion"])

    async def ping(self) -> None:
        """A readiness check: the API server answers."""
        await self.server_version()

    async def create(self, manifest: Manifest) -> Manifest:
        method, namespaced = self._method(manifest["kind"], "create")
        if namespaced:
            created: Manifest = await self._call(
                method, manifest["metadata"]["namespace"], manifest
            )
        else:
            created = await self._call(method, manifest)
        return created

    async def ensure(self, manifest: Manifest) -> None:
        """Create, or bring an existing object's spec up to date (merge patch)."""
        try:
            await self.create(manifest)
        except ConflictError:
            await self.patch(
                manifest["kind"],
                manifest["metadata"].get("namespace"),
                manifest["metadata"]["name"],
                manifest,
            )

    async def ensure_whole(self, manifest: Manifest) -> None:
        """Create, or replace an existing object whole (an update): for a writer that
        may not read what is there, since a patch answers the whole stored object, a
        Secret's data included, and an update only what it sent (review N5)."""
        try:
            await self.create(manifest)
        except ConflictError:
            metadata = manifest["metadata"]
            await self.replace(
                manifest["kind"], metadata.get("namespace"), metadata["name"], manifest
            )

    async def patch(self, kind: str, namespace: str | None, name: str, body: Manifest) -> Manifest:
        method, namespaced = self._method(kind, "patch")
        args = (name, namespace, body) if namespaced else (name, body)
        return cast(Manifest, await self._call(method, *args))

    async def patch_status(
        self, kind: str, namespace: str | None, name: str, body: Manifest
    ) -> Manifest:
        """`patch` of the object's status subresource (a built-in kind)."""
        method, namespaced = self._method(kind, "patch", "status")
        args = (name, namespace, body) if namespaced else (name, body)
        return cast(Manifest, await self._call(method, *args))

    async def create_in(
        self, kind: str, namespace: str, name: str, sub: str, body: Manifest
    ) -> Manifest:
        """Create a namespaced object's subresource (a ServiceAccount's `token`)."""
        method, _ = self._method(kind, "create", sub)
        return cast(Manifest, await self._call(method, name, namespace, body))

    async def read(self, kind: str, namespace: str | None, name: str) -> Manifest:
        method, namespaced = self._method(kind, "read")
        args = (name, namespace) if namespaced else (name,)
        return cast(Manifest, await self._call(method, *args))

    async def replace(
        self, kind: str, namespace: str | None, name: str, body: Manifest
    ) -> Manifest:
        method, namespaced = self._method(kind, "replace")
        args = (name, namespace, body) if namespaced else (name, body)
        return cast(Manifest, await self._call(method, *args))

    async def delete(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        grace_s: int | None = None,
        cascade: bool = False,
    ) -> bool:
        """Delete if present; False when it was already gone. `cascade` deletes what
        the object owns too (a Job's pods, which the API orphans by default)."""
        method, namespaced = self._method(kind, "delete")
        args = (name, namespace) if namespaced else (name,)
        kwargs: dict[str, Any] = {} if grace_s is None else {"grace_period_seconds": grace_s}
        if cascade:
            kwargs["propagation_policy"] = "Background"
        try:
            await self._call(method, *args, **kwargs)
        except NotFoundError:
            return False
        return True

    async def list(
        self, kind: str, *, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[Manifest], str]:
        """All objects of `kind` (every namespace); returns (items, resourceVersion)."""
        method, _ = self._method(kind, "list")
        result = await self._call(
            method, label_selector=label_selector, field_selector=field_selector
        )
        return result.get("items", []), result["metadata"]["resourceVersion"]

    async def pod_logs(
        self,
        namespace: str,
        name: str,
        *,
        container: str,
        follow: bool,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> AsyncGenerator[bytes]:
        """A container's log as the kubelet serves it, in chunks as they come; with
        `follow`, until the container ends or the caller stops reading; at most
        `limit_bytes` of it when given (the kubelet stops there)."""
        method = client.CoreV1Api(self.api).read_namespaced_pod_log
        kwargs: dict[str, Any] = {"container": container, "follow": follow}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if limit_bytes is not None:
            kwargs["limit_bytes"] = limit_bytes
        try:
            response: Any = await method(name, namespace, _preload_content=False, **kwargs)
        except ApiException as error:
            raise _error(error) from error
        except (TimeoutError, OSError) as error:
            raise DependencyUnavailable(f"Kubernetes API unreachable: {error}") from error
        try:
            if not 200 <= response.status <= 299:
                raise _failed(response.status, response.reason, await response.read())
            async for chunk in response.content.iter_any():
                yield chunk
        finally:
            response.release()

    async def watch(
        self, kind: str, *, resource_version: str, label_selector: str = "", timeout_s: int = 240
    ) -> AsyncIterator[tuple[str, Manifest]]:
        """Yield (event type, object) from `resource_version` on; GoneError when it expired."""
        method, _ = self._method(kind, "list")
        stream = _RawWatch()
        try:
            async for event in stream.stream(
                method,
                label_selector=label_selector,
                resource_version=resource_version,
                timeout_seconds=timeout_s,
                allow_watch_bookmarks=True,
            ):
                raw: Manifest = event["raw_object"]
                if event["type"] == "ERROR":
                    if raw.get("code") == 410:
                        raise GoneError(str(raw.get("message")), 410)
                    raise KubeError(str(raw.get("message")), raw.get("code"))
                yield event["type"], raw
        except ApiException as error:
            raise _error(error) from error
        except (TimeoutError, OSError, aiohttp.ClientError) as error:
            raise DependencyUnavailable(f"Kubernetes watch broke: {error}") from error
        except RuntimeError as error:
            # aiohttp's word for a stream the server closed midway.
            if "Connection closed" not in str(error):
                raise
            raise DependencyUnavailable(f"Kubernetes watch broke: {error}") from error
        finally:
            stream.stop()
            await stream.close()
