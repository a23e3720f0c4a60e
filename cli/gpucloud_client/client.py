"""The typed client of the gpucloud API: one authenticated HTTP session, a method per
operation, problems raised as `ApiError`.

    from gpucloud_client import Client

    with Client("https://gpu.example.com", api_key) as cloud:
        instance = cloud.create_instance({"image": "jupyter/base-notebook", "specName": "h100-1"})
        instance = cloud.wait_for_instance(instance["instanceID"], until={"running"})
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

from .api_session import ApiSession, _id, _items
from .errors import ApiError
from .models import (
    Alert,
    Identity,
    Node,
    ObjectListing,
    PartUrls,
    PresignedUrl,
    Storage,
    Tenant,
    UploadPlan,
    UsageReport,
    User,
)
from .workload_api import (
    ENDED_JOB_STATES,
    SETTLED_INSTANCE_STATES,
    STOPPED_INSTANCE_STATES,
    WorkloadApi,
)

#: The states a wait may end in, where they were before the client was cut in parts.
__all__ = ["ENDED_JOB_STATES", "SETTLED_INSTANCE_STATES", "STOPPED_INSTANCE_STATES", "Client"]


class Client(WorkloadApi, ApiSession):
    """One endpoint and one credential (an API key or a session token): a method per
    operation (workloads' in workload_api.py, the session's own in api_session.py)."""

    # --- identity ----------------------------------------------------------------------

    def whoami(self) -> Identity:
        return cast(Identity, self.request("GET", "/whoami"))

    def list_users(self, *, tenant: str | None = None) -> Iterator[User]:
        """The caller's tenant's users (an admin's call), or with `tenant` that tenant's
        (a platform admin's)."""
        path = "/users" if tenant is None else f"/tenants/{_id(tenant)}/users"
        return self.pages_after(path, "userID", 500)

    def add_user(self, body: dict[str, Any], *, tenant: str | None = None) -> User:
        """A user of the caller's tenant, or with `tenant` of that one (a platform admin's)."""
        path = "/users" if tenant is None else f"/tenants/{_id(tenant)}/users"
        return cast(User, self.request("POST", path, json=body))

    def update_user(self, user_id: str, body: dict[str, Any]) -> User:
        """Change a user's name, role or status (`disabled` ends their keys and sessions)."""
        return cast(User, self.request("PATCH", f"/users/{_id(user_id)}", json=body))

    def delete_user(self, user_id: str) -> None:
        self.request("DELETE", f"/users/{_id(user_id)}")

    def revoke_key(self, key_id: str) -> None:
        """Revoke an API key on the server: it stops working at once."""
        self.request("DELETE", f"/api-keys/{_id(key_id)}")

    # --- the catalog: specs, prices, templates --------------------------------------------

    def list_specs(self) -> list[dict[str, Any]]:
        return _items(self.request("GET", "/specs"))

    def list_prices(self) -> list[dict[str, Any]]:
        return _items(self.request("GET", "/prices"))

    def quota(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", "/quota"))

    def own_tenant(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", "/tenant"))

    def set_own_quota(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("PUT", "/tenant/quota", json=body))

    # --- the operator's catalog and customers --------------------------------------------

    def create_spec(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("POST", "/specs", json=body))

    def delete_spec(self, name: str) -> None:
        self.request("DELETE", f"/specs/{_id(name)}")

    def set_price(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("POST", "/prices", json=body))

    def withdraw_price(self, price_id: str) -> None:
        self.request("DELETE", f"/prices/{_id(price_id)}")

    def create_tenant(self, body: dict[str, Any]) -> dict[str, Any]:
        """The tenant, its first admin and that admin's API key (shown this once)."""
        return cast(dict[str, Any], self.request("POST", "/tenants", json=body))

    def list_templates(self) -> list[dict[str, Any]]:
        return _items(self.request("GET", "/templates"))

    def get_template(self, template_id: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", f"/templates/{_id(template_id)}"))

    # --- storages ----------------------------------------------------------------------

    def list_storages(self) -> Iterator[Storage]:
        return self.pages("/storages", {"limit": 200})

    def get_storage(self, storage_id: str) -> Storage:
        return cast(Storage, self.request("GET", f"/storages/{_id(storage_id)}"))

    def create_storage(self, body: dict[str, Any]) -> Storage:
        return cast(Storage, self.request("POST", "/storages", json=body))

    def delete_storage(self, storage_id: str, *, force: bool = False) -> None:
        params = {"force": "true" if force else None}
        self.request("DELETE", f"/storages/{_id(storage_id)}", params=params)

    def create_accessor(self, storage_id: str, mode: str) -> dict[str, Any]:
        path = f"/storages/{_id(storage_id)}/accessors"
        return cast(dict[str, Any], self.request("POST", path, json={"mode": mode}))

    def list_objects(
        self, storage_id: str, *, prefix: str = "", delimiter: str = "",
        cursor: str | None = None, limit: int = 1000,
    ) -> ObjectListing:  # fmt: skip
        params = {"prefix": prefix, "delimiter": delimiter, "cursor": cursor, "limit": limit}
        path = f"/storages/{_id(storage_id)}/objects"
        return cast(ObjectListing, self.request("GET", path, params=params))

    def plan_upload(self, storage_id: str, key: str, size_bytes: int) -> UploadPlan:
        path = f"/storages/{_id(storage_id)}/uploads"
        body = {"key": key, "sizeBytes": size_bytes}
        return cast(UploadPlan, self.request("POST", path, json=body))

    def presign_parts(self, storage_id: str, upload_id: str, numbers: list[int]) -> PartUrls:
        path = f"/storages/{_id(storage_id)}/uploads/{_id(upload_id)}/parts"
        return cast(PartUrls, self.request("POST", path, json={"partNumbers": numbers}))

    def complete_upload(
        self, storage_id: str, upload_id: str, etags: dict[int, str]
    ) -> dict[str, Any]:
        path = f"/storages/{_id(storage_id)}/uploads/{_id(upload_id)}/complete"
        parts = [{"partNumber": n, "etag": etags[n]} for n in sorted(etags)]
        return cast(dict[str, Any], self.request("POST", path, json={"parts": parts}))

    def presign_uploads(self, storage_id: str, objects: list[tuple[str, int]]) -> dict[str, str]:
        """Single-PUT URLs for up to 1,000 small objects, (key, size) each: key → URL."""
        path = f"/storages/{_id(storage_id)}/upload-urls"
        body = {"objects": [{"key": key, "sizeBytes": size} for key, size in objects]}
        return {u["key"]: u["url"] for u in self.request("POST", path, json=body)["urls"]}

    def presign_downloads(self, storage_id: str, keys: list[str]) -> dict[str, str]:
        """GET URLs for up to 1,000 objects: key → URL."""
        path = f"/storages/{_id(storage_id)}/download-urls"
        return {u["key"]: u["url"] for u in self.request("POST", path, json={"keys": keys})["urls"]}

    def presign_download(self, storage_id: str, key: str) -> PresignedUrl:
        path = f"/storages/{_id(storage_id)}/downloads"
        return cast(PresignedUrl, self.request("POST", path, json={"key": key}))

    # --- usage, alerts, fleet, tenants -------------------------------------------------

    def revenue(
        self, *, group_by: str = "gpu_type", start: str | None = None, end: str | None = None
    ) -> UsageReport:
        """Revenue across tenants (platform admin)."""
        params = {"groupBy": group_by, "start": start, "end": end}
        return cast(UsageReport, self.request("GET", "/revenue", params=params))

    def usage(
        self,
        *,
        group_by: str = "instance",
        start: str | None = None,
        end: str | None = None,
        mine: bool = False,
        project: str | None = None,
    ) -> UsageReport:
        """The tenant's usage (of one `project`'s work), or with `mine` the caller's own
        (what they started)."""
        params = {"groupBy": group_by, "start": start, "end": end, "project": project}
        path = "/usage/mine" if mine else "/usage"
        return cast(UsageReport, self.request("GET", path, params=params))

    def list_invoices(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """The invoices issued (every tenant's, or `tenant`'s, to a platform admin)."""
        return cast(
            list[dict[str, Any]], self.request("GET", "/invoices", params={"tenantID": tenant})
        )

    def get_invoice(self, invoice_id: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", f"/invoices/{_id(invoice_id)}"))

    def draft_invoice(
        self, period: str | None = None, *, tenant: str | None = None
    ) -> dict[str, Any]:
        """What a month's invoice says so far (`period` YYYY-MM; this month's, UTC, by
        default)."""
        month = period or datetime.now(UTC).strftime("%Y-%m")
        path = f"/invoice-drafts/{_id(month)}"
        return cast(dict[str, Any], self.request("GET", path, params={"tenantID": tenant}))

    def list_alerts(self, *, state: str | None = None, rule: str | None = None) -> list[Alert]:
        params = {"state": state, "ruleID": rule}
        return cast(list[Alert], self.request("GET", "/alerts", params=params))

    def capacity(self) -> list[dict[str, Any]]:
        """Free GPUs by zone and type, node by node (anyone may read it)."""
        return cast(list[dict[str, Any]], self.request("GET", "/capacity"))

    def list_nodes(self) -> list[Node]:
        return cast(list[Node], self.request("GET", "/nodes"))

    def release_node(self, node: str) -> Node:
        return cast(Node, self.request("POST", f"/nodes/{_id(node)}/release"))

    def quarantine_node(self, node: str, reason: str) -> Node:
        path = f"/nodes/{_id(node)}/quarantine"
        return cast(Node, self.request("POST", path, json={"reason": reason}))

    def list_tenants(self) -> Iterator[Tenant]:
        return self.pages_after("/tenants", "tenantID", 100)

    def get_tenant(self, tenant_id: str) -> Tenant:
        return cast(Tenant, self.request("GET", f"/tenants/{_id(tenant_id)}"))

    def list_regions(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.request("GET", "/regions"))

    def list_clusters(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.request("GET", "/clusters"))

    def get_cluster(self, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", f"/clusters/{_id(name)}"))

    def register_cluster(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("POST", "/clusters", json=body))

    def set_cluster_state(self, name: str, verb: str) -> dict[str, Any]:
        """`verb`: cordon, drain or uncordon."""
        return cast(dict[str, Any], self.request("POST", f"/clusters/{_id(name)}/{verb}"))

    def delete_cluster(self, name: str) -> None:
        self.request("DELETE", f"/clusters/{_id(name)}")

    def give_storage_access(self, name: str, kubeconfig: str) -> dict[str, Any]:
        """The storage service's own kubeconfig for a registered cluster."""
        path = f"/storage-clusters/{_id(name)}"
        return cast(dict[str, Any], self.request("PUT", path, json={"kubeconfig": kubeconfig}))

    def take_storage_access(self, name: str) -> bool:
        """Whether the storage service had access to the cluster (now gone)."""
        try:
            self.request("DELETE", f"/storage-clusters/{_id(name)}")
        except ApiError as error:
            if error.status != 404:
                raise
            return False
        return True

    def list_stocks(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.request("GET", "/stocks"))

    def change_stock(self, body: dict[str, Any], *, add: bool) -> dict[str, Any]:
        """Add (POST) or remove (DELETE) a stock's units: `body` is a StockChange."""
        return cast(dict[str, Any], self.request("POST" if add else "DELETE", "/stocks", json=body))

    def list_keys(self) -> Iterator[dict[str, Any]]:
        """The caller's API keys; an admin's call lists every key of the tenant."""
        return cast(Iterator[dict[str, Any]], self.pages_after("/api-keys", "keyID", 200))

    def mint_key(self, user_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """An API key for a user of the admin's tenant; its `secret` is in this answer only."""
        path = f"/users/{_id(user_id)}/api-keys"
        return cast(dict[str, Any], self.request("POST", path, json=body))

    def user_limits(self, user_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A user's own limits; with `body` (a UserLimits), set them first."""
        path = f"/users/{_id(user_id)}/limits"
        if body is None:
            return cast(dict[str, Any], self.request("GET", path))
        return cast(dict[str, Any], self.request("PUT", path, json=body))

    def projects(self) -> list[dict[str, Any]]:
        """The tenant's projects (an admin's all, a user's own), `default` first."""
        return cast(list[dict[str, Any]], self.request("GET", "/projects"))

    def project(self, project_id: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", f"/projects/{_id(project_id)}"))

    def create_project(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("POST", "/projects", json=body))

    def update_project(self, project_id: str, body: dict[str, Any]) -> dict[str, Any]:
        path = f"/projects/{_id(project_id)}"
        return cast(dict[str, Any], self.request("PATCH", path, json=body))

    def delete_project(self, project_id: str) -> None:
        self.request("DELETE", f"/projects/{_id(project_id)}")

    def add_project_member(self, project_id: str, user_id: str) -> dict[str, Any]:
        path = f"/projects/{_id(project_id)}/members/{_id(user_id)}"
        return cast(dict[str, Any], self.request("PUT", path))

    def remove_project_member(self, project_id: str, user_id: str) -> None:
        self.request("DELETE", f"/projects/{_id(project_id)}/members/{_id(user_id)}")

    def invite(self, body: dict[str, Any]) -> dict[str, Any]:
        """An invitation to the caller's tenant; the link's `token` is in this answer only."""
        return cast(dict[str, Any], self.request("POST", "/invitations", json=body))

    def list_invitations(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.request("GET", "/invitations"))

    def revoke_invitation(self, invitation_id: str) -> None:
        self.request("DELETE", f"/invitations/{_id(invitation_id)}")

    def preview_invitation(self, token: str) -> dict[str, Any]:
        """What an invitation offers; needs no credential (the token is one)."""
        return cast(
            dict[str, Any], self.request("POST", "/invitations/preview", json={"token": token})
        )

    def accept_invitation(self, token: str, name: str, password: str) -> dict[str, Any]:
        """Become the invited user; needs no credential (the token is one)."""
        body = {"token": token, "name": name, "password": password}
        return cast(dict[str, Any], self.request("POST", "/invitations/accept", json=body))

    def start_sso_device(self, tenant_id: str) -> dict[str, Any]:
        """Begin a sign-in through the tenant's single sign-on: a code to enter at the
        provider, and the token to poll with; needs no credential."""
        return cast(dict[str, Any], self.request("POST", f"/sso/{_id(tenant_id)}/device"))

    def join_by_sso_device(self, token: str) -> dict[str, Any]:
        """Begin accepting an invitation by a sign-in at the tenant's provider (as
        `start_sso_device`); needs no credential (the token is one)."""
        body = {"token": token}
        return cast(dict[str, Any], self.request("POST", "/invitations/sso-device", json=body))

    def poll_sso_device(self, poll_token: str) -> dict[str, Any]:
        """`pending`, or `signed_in` with a short-lived token of the user."""
        body = {"pollToken": poll_token}
        return cast(dict[str, Any], self.request("POST", "/sso/device/token", json=body))

    def create_key(self, body: dict[str, Any]) -> dict[str, Any]:
        """An API key of the caller's own; its `secret` is in this answer only."""
        return cast(dict[str, Any], self.request("POST", "/api-keys", json=body))

    def sign_in(self, email: str, password: str) -> str:
        """A short-lived token for the user's email and password."""
        issued = self.request("POST", "/tokens", json={"email": email, "password": password})
        return str(issued["token"])

    def kubeconfig(self, hours: int, project: str | None = None) -> dict[str, Any]:
        """A short-lived kubectl credential for the namespace of one of the caller's
        projects (`default`: their tenant's own; left out, `default` or a project key's
        own)."""
        body: dict[str, Any] = {"hours": hours, **({"project": project} if project else {})}
        return cast(dict[str, Any], self.request("POST", "/kubeconfig", json=body))

    def sso(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The tenant's single sign-on; with `body` (an SsoConfigSet), set it first."""
        if body is None:
            return cast(dict[str, Any], self.request("GET", "/tenant/sso"))
        return cast(dict[str, Any], self.request("PUT", "/tenant/sso", json=body))

    def sso_off(self) -> None:
        self.request("DELETE", "/tenant/sso")
