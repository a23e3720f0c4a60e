"""The instances service's side of the storage contract (the storage service's
`PUT /attachments/{instance}` and `GET /storages/{id}`).

An instance names storages in two places: `storageIDs` (seed 004's storageID)
and template volumes with a `storageID`. A volume storage must be mounted by a
template volume; an object storage reaches the instance as S3 credentials in
environment variables, so it is listed in `storageIDs` and never mounted.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import aiohttp
from yarl import URL

from gpucloud_libs.errors import DependencyUnavailable, ValidationFailed
from gpucloud_libs.identity import IDENTITY_HEADER, Identity, IdentitySigner
from gpucloud_libs.naming import DEFAULT_PROJECT
from gpucloud_libs.project_shares import storage_refusal, volume_refusal

from .schemas import VolumeSpec

#: The subject the storage service accepts attachment calls from.
SERVICE_SUBJECT = "service:instances"
TIMEOUT_S = 10.0


class StorageRefused(Exception):
    """The storage service answered no (gone, not ready, wrong kind): not worth retrying."""


class StorageAnswer:
    """The storage service's answer: its status and JSON body, read in full."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body


class StorageClient:
    def __init__(self, base_url: str, signer: IdentitySigner) -> None:
        self._base_url = base_url.rstrip("/")
        self._signer = signer
        self._http: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running loop (aiohttp binds a session to it).
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        return self._http

    async def _call(
        self,
        method: str,
        path: str,
        caller: Identity,
        body: dict[str, Any] | None = None,
    ) -> StorageAnswer:
        # Signed by this service for this one request; the storage service trusts it
        # for tenant roles only (never a platform admin).
        content = b"" if body is None else json.dumps(body).encode()
        token = self._signer.sign(
            subject=caller.subject,
            role=caller.role,
            tenant_id=caller.tenant_id,
            audience="storage",
            method=method,
            path=path,
            body=content,
            project=caller.project,
            projects=caller.projects,
        )
        headers = {IDENTITY_HEADER: token, "Content-Type": "application/json"}
        try:
            async with self._session().request(
                method,
                URL(f"{self._base_url}{path}", encoded=True),
                data=content or None,
                headers=headers,
            ) as response:
                if response.status >= 500:
                    raise DependencyUnavailable(f"storage service answered {response.status}")
                return StorageAnswer(response.status, await response.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError) as error:
            raise DependencyUnavailable(f"storage service unreachable: {error}") from error

    async def requested(
        self, identity: Identity, storage_ids: list[str], volumes: list[VolumeSpec],
        project: str,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Check the storages an instance or job names, as its caller; what to record. A
        project's work takes its own project's storages and default's, and volumes of
        its own project alone: a volume's claim lives in its project's namespace, and a
        pod mounts no claim of another namespace (decision 140); a 409 otherwise."""
        mounted = {v.storage_id: v.read_only for v in volumes if v.storage_id}
        wanted = list(dict.fromkeys([*storage_ids, *mounted]))
        chosen: list[dict[str, Any]] = []
        for storage_id in wanted:
            response = await self._call("GET", f"/storages/{quote(storage_id, safe='')}", identity)
            if response.status != 200:
                raise ValidationFailed(f"storage {storage_id!r}: {response.body.get('detail')}")
            kind, owner = response.body["kind"], response.body.get("project", DEFAULT_PROJECT)
            if (refusal := storage_refusal(storage_id, owner, project)) is not None:
                raise refusal
            if kind == "volume" and owner != project:
                raise volume_refusal(storage_id, project)
            if kind == "volume" and storage_id not in mounted:
                raise ValidationFailed(
                    f"volume storage {storage_id!r} needs a template volume that mounts it"
                )
            if kind == "object" and storage_id in mounted:
                raise ValidationFailed(
                    f"object storage {storage_id!r} cannot be mounted; list it in storageIDs "
                    "and the instance gets S3 credentials for it as environment variables"
                )
            chosen.append({"storageID": storage_id, "readOnly": mounted.get(storage_id, False)})
        return chosen

    async def attach(
        self, tenant_id: str, instance_id: str, storages: list[dict[str, Any]], *, stay: int = 0,
        cluster: str | None = None, project: str = DEFAULT_PROJECT,
    ) -> list[tuple[str, str]]:  # fmt: skip
        """Have the storage service make what the instance needs: the (Secret, variable
        prefix) of each object storage, in request order, for the pod's env. A job
        attaches as `naming.job_workload_id(job)`. `stay`: the sequence of the instance's
        latest `pending`, so that the end of an earlier stay releases nothing of this one.
        `cluster`: the registered cluster its pods run in, where the storage service
        writes its Secrets (None: the home cluster), in `project`'s namespace."""
        service = Identity(
            subject=SERVICE_SUBJECT, role="tenant-admin", tenant_id=tenant_id, expires_at=0
        )
        response = await self._call(
            "PUT",
            f"/attachments/{quote(instance_id, safe='')}",
            service,
            {"storages": storages, "stay": stay, "cluster": cluster, "project": project},
        )
        if response.status != 200:
            raise StorageRefused(str(response.body.get("detail")))
        plan: list[dict[str, Any]] = response.body["storages"]
        return [
            (item["secretName"], item["envPrefix"]) for item in plan if item["kind"] == "object"
        ]
