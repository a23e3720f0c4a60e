"""Image pull Secrets: a tenant's registry logins, where its pods can use them.

Before a workload's pod (an instance's, a job's, a service's replicas) is made,
the logins of the tenant for its image's registry are written into the tenant's
namespace as `kubernetes.io/dockerconfigjson` Secrets and named in the pod's
`imagePullSecrets`. The password is opened from its sealed form only here.
The service may write these Secrets and no others, and reads none (RBAC and the
admission policy, docs/security.md).
"""

from __future__ import annotations

from gpucloud_libs.kube import ConflictError, KubeClient
from gpucloud_libs.sealing import SecretBox

from ..schemas import image_registry
from . import manifests as registry_manifests
from .store import RegistryCredentialStore


class PullSecrets:
    def __init__(
        self, credentials: RegistryCredentialStore, box: SecretBox, kube: KubeClient
    ) -> None:
        self._credentials = credentials
        self._box = box
        self._kube = kube
        #: (API server, namespace, credential key, its creation) already written.
        self._written: set[tuple[str, str, str, str]] = set()

    async def for_image(
        self, tenant_id: str, namespace: str, image: str, kube: KubeClient | None = None
    ) -> list[str]:
        """The names of the pull Secrets for `image`, written first where needed, in the
        cluster `kube` reaches (the home cluster's when None)."""
        kube = kube or self._kube
        cluster = kube.api.configuration.host or ""
        names = []
        for doc in await self._credentials.for_registry(tenant_id, image_registry(image)):
            marker = (cluster, namespace, doc["_id"], doc["created_at"].isoformat())
            if marker not in self._written:
                password = self._box.open(doc["sealed_password"])
                if password is None:
                    continue  # sealed with another key: no login to give
                secret = registry_manifests.pull_secret(
                    namespace, doc["credential_id"], doc["registry"], doc["username"], password
                )
                try:
                    await kube.create(secret)
                except ConflictError:
                    await kube.replace("Secret", namespace, secret["metadata"]["name"], secret)
                self._written.add(marker)
            names.append(registry_manifests.pull_secret_name(doc["credential_id"]))
        return names

    async def remove(self, namespace: str, credential_id: str) -> None:
        await self._kube.delete(
            "Secret", namespace, registry_manifests.pull_secret_name(credential_id)
        )
        # Only that namespace's: another tenant may use the same credential id.
        self._written = {
            w
            for w in self._written
            if not (w[1] == namespace and w[2].endswith(f"/{credential_id}"))
        }
