"""`gpucloud kubeconfig`: a short-lived kubectl credential for a user, in the namespace
of one of their projects (their tenant's own for `default`) in the home cluster, and
nowhere else.

Each user gets a ServiceAccount of their own there (`gpc-user-<user id>`), bound to
the users' kubectl role: read pods and events, logs, exec and port-forward. Never
pod creation: a pod made with kubectl would escape quota, placement, policy and
billing. The credential is a bound token of that account (TokenRequest), so it
ends at its expiry, and at once when the account is deleted: when the user is
disabled, removed or given another role (UserAccessEnded: every namespace's), or
leaves the project, or the project is deleted (`prune`, at each of the tenant's
events, from the projects as they are).
"""

from __future__ import annotations

import base64
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from gpucloud_libs.errors import Conflict, DependencyUnavailable, Forbidden, NotFound
from gpucloud_libs.http import ApiModel
from gpucloud_libs.identity import Identity
from gpucloud_libs.kube import ConflictError, KubeClient, KubeError, NotFoundError
from gpucloud_libs.kubeconfigs import kubeconfig_server, parsed_kubeconfig
from gpucloud_libs.naming import (
    DEFAULT_PROJECT,
    PROJECT_ID_PATTERN,
    TENANT_LABEL,
    USER_ACCOUNT_PREFIX,
    project_namespace,
)
from gpucloud_libs.project_shares import acting_project, is_member

from ..admission import project_member
from ..documents import tenant_namespaces
from ..settings import InstancesSettings
from .store import TenantStore

log = logging.getLogger(__name__)

IN_CLUSTER_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")


class KubeconfigRequest(ApiModel):
    #: How long the credential works.
    hours: int = Field(default=1, ge=1, le=12)
    #: The project whose namespace it reaches: one the caller is a member of
    #: (`default` when left out, or the key's own project for a key of one).
    project: str | None = Field(default=None, pattern=PROJECT_ID_PATTERN)


class IssuedKubeconfig(ApiModel):
    #: A kubeconfig, YAML: its one context is the project's namespace.
    kubeconfig: str
    namespace: str
    project: str
    cluster: str
    expires_at: datetime


#: On a user's ServiceAccounts: whose they are, so their end finds them all.
USER_LABEL = "gpucloud.io/user"
#: On one made for a tenant admin in a project they are not a member of.
AS_ADMIN_LABEL = "gpucloud.io/as-admin"


def user_account(user_id: str) -> str:
    return f"{USER_ACCOUNT_PREFIX}{user_id}"


class UserKubeconfigs:
    def __init__(self, settings: InstancesSettings, kube: KubeClient, tenants: TenantStore) -> None:
        self._settings = settings
        self._kube = kube
        self._tenants = tenants
        self._access: tuple[str, str] | None = None  # read once, at the first request

    async def issue(self, identity: Identity, body: KubeconfigRequest) -> IssuedKubeconfig:
        tenant_id = identity.require_tenant()
        user_id = identity.subject
        if not user_id.startswith("u-"):
            raise Forbidden("a kubeconfig is a user's; this credential belongs to no user")
        tenant = await self._tenants.get(tenant_id)
        if tenant is None:
            raise Conflict("your tenant is not set up here yet; retry")
        project = project_member(tenant, identity, acting_project(identity, body.project))
        server, authority = self._cluster_access()
        namespace, account = project_namespace(tenant_id, project), user_account(user_id)
        labels = {TENANT_LABEL: tenant_id, USER_LABEL: user_id}
        if not is_member(tenant.get("projects"), project, user_id):
            labels[AS_ADMIN_LABEL] = "true"  # a tenant admin's, ended by a change of role
        try:
            made = {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": namespace, "labels": labels}}  # fmt: skip
            if not await self._made(made):
                # Made before: how it is held (a member's, or an admin's) is as it is now.
                as_admin = labels.get(AS_ADMIN_LABEL)
                await self._kube.patch(
                    "ServiceAccount", namespace, account,
                    {"metadata": {"labels": {AS_ADMIN_LABEL: as_admin}}},
                )  # fmt: skip
            await self._made(_binding(namespace, account, self._settings.tenant_kubectl_role))
            issued = await self._kube.create_in(
                "ServiceAccount", namespace, account, "token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": body.hours * 3600}},
            )  # fmt: skip
        except NotFoundError as error:
            raise Conflict("the project's namespace is not ready yet; retry") from error
        except KubeError as error:
            raise DependencyUnavailable(
                f"the cluster did not issue the credential ({error.status}); retry"
            ) from error
        await self._still_allowed(identity, project, namespace, account)
        status = issued["status"]
        kubeconfig = _kubeconfig(
            self._settings.cluster_name, server, authority, namespace, f"{user_id}@{tenant_id}",
            status["token"],
        )  # fmt: skip
        return IssuedKubeconfig(
            kubeconfig=kubeconfig, namespace=namespace, project=project,
            cluster=self._settings.cluster_name,
            expires_at=status["expirationTimestamp"],
        )  # fmt: skip

    async def _made(self, manifest: dict[str, Any]) -> bool:
        """Create it unless it is there (the binding never changes); whether it was."""
        try:
            await self._kube.create(manifest)
        except ConflictError:
            return False
        return True

    async def _still_allowed(
        self, identity: Identity, project: str, namespace: str, account: str
    ) -> None:
        """The membership read again once the account is made: one that ended meanwhile
        (and was pruned before the account existed) ends the account now, a 404."""
        tenant = await self._tenants.get(identity.require_tenant())
        try:
            if tenant is None:
                raise NotFound(f"project {project!r} does not exist")
            project_member(tenant, identity, project)
        except NotFound:
            await self._end(identity.require_tenant(), identity.subject, namespace, account)
            raise

    async def forget(self, tenant_id: str, user_id: str) -> None:
        """The user's access ended (disabled, removed, or their role changed): their
        accounts go, every namespace's, and every token of them with them."""
        selector = f"{TENANT_LABEL}={tenant_id},{USER_LABEL}={user_id}"
        accounts, _ = await self._kube.list("ServiceAccount", label_selector=selector)
        for found in accounts:
            meta = found["metadata"]
            await self._end(tenant_id, user_id, meta["namespace"], meta["name"])

    async def prune(self, tenant_id: str) -> None:
        """End the accounts the tenant's projects no longer allow, as it now is (so a
        redelivered event, or one after a failed prune, ends them too): in a project's
        namespace, those of users who are not its members (a tenant admin's, made as
        an admin, stay: a change of role ends those), and every one in the namespace
        of a deleted project; every one while the tenant is suspended (review N4: the
        gateway takes no change from it, and kubectl is one)."""
        tenant = await self._tenants.get(tenant_id)
        if tenant is None:
            return
        suspended = tenant["status"] != "active"
        project_of_namespace = {ns: project for project, ns in tenant_namespaces(tenant).items()}
        accounts, _ = await self._kube.list(
            "ServiceAccount", label_selector=f"{TENANT_LABEL}={tenant_id},{USER_LABEL}"
        )
        for found in accounts:
            meta = found["metadata"]
            user_id, labels = meta["labels"][USER_LABEL], meta["labels"]
            project = project_of_namespace.get(meta["namespace"])
            allowed = project == DEFAULT_PROJECT or (
                project is not None
                and (
                    is_member(tenant.get("projects"), project, user_id)
                    or labels.get(AS_ADMIN_LABEL) == "true"
                )
            )
            if allowed and not suspended:
                continue
            await self._end(tenant_id, user_id, meta["namespace"], meta["name"])

    async def _end(self, tenant_id: str, user_id: str, namespace: str, account: str) -> None:
        await self._kube.delete("RoleBinding", namespace, account)
        if await self._kube.delete("ServiceAccount", namespace, account):
            log.info(
                "a user's kubectl access ended",
                extra={"tenant_id": tenant_id, "user": user_id, "namespace": namespace},
            )

    def _cluster_access(self) -> tuple[str, str]:
        """The API server users reach, and its CA (base64 PEM), from the settings or the
        service's own kubeconfig; in a cluster, the server must be set."""
        if self._access is not None:
            return self._access
        server, authority = self._settings.user_kube_server, None
        if self._settings.kubeconfig:
            config = parsed_kubeconfig(Path(self._settings.kubeconfig).read_text())
            server = server or kubeconfig_server(config)
            authority = _authority(config)
        elif IN_CLUSTER_CA.is_file():
            authority = base64.b64encode(IN_CLUSTER_CA.read_bytes()).decode()
        if not server or not authority:
            raise Conflict(
                "kubeconfigs are not offered here: the operator has not set the API server "
                "users reach (the chart's kubeconfigs.server)"
            )
        self._access = (server, authority)
        return self._access


def _authority(config: dict[str, Any]) -> str | None:
    """The CA of the kubeconfig's current cluster, base64 PEM."""
    contexts = {c["name"]: c.get("context", {}) for c in config.get("contexts") or []}
    name = (contexts.get(config.get("current-context")) or {}).get("cluster")
    cluster: dict[str, Any] = next(
        (c.get("cluster", {}) for c in config["clusters"] if c["name"] == name), {}
    )
    if cluster.get("certificate-authority-data"):
        return str(cluster["certificate-authority-data"])
    if cluster.get("certificate-authority"):
        return base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    return None


def _binding(namespace: str, account: str, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": account, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }  # fmt: skip


def _kubeconfig(
    cluster: str, server: str, authority: str, namespace: str, user: str, token: str
) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": namespace,
        "clusters": [{"name": cluster,
                      "cluster": {"server": server, "certificate-authority-data": authority}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": namespace,
                      "context": {"cluster": cluster, "user": user, "namespace": namespace}}],
    }, sort_keys=False)  # fmt: skip
