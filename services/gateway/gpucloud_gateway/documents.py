"""The gateway's stored documents, typed at the store boundary.

A misspelt field is a type error rather than a KeyError at run time. Fields
that older documents may lack, or that a later write adds, are NotRequired
and read with `.get`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict


class TenantDoc(TypedDict):
    _id: str
    name: str
    status: str  # active | suspended | deleted
    #: The platform admin's limits and the tenant admin's own, field by field.
    limits: dict[str, Any]
    self_quota: dict[str, Any]
    rate_limit: dict[str, Any] | None
    #: Its weight in the admission queue (absent: 1).
    queue_weight: NotRequired[float]
    #: Limits of the tenant's users that have any (tenant admin), by user id.
    user_limits: NotRequired[dict[str, dict[str, Any]]]
    #: Projects but `default`, by id: a ProjectShare each (decision 138).
    projects: NotRequired[dict[str, dict[str, Any]]]
    created_at: datetime
    updated_at: datetime
    #: Every change moves the tenant to a new revision, published as its event id.
    revision: int
    published_revision: NotRequired[int | None]


class UserDoc(TypedDict):
    _id: str
    tenant_id: str | None  # None: a platform admin
    email: str
    name: str
    role: str
    status: str  # active | disabled | deleted
    password_hash: str | None
    #: Bumped by each password change: tokens and console sessions of an older one end.
    credentials_version: NotRequired[int]
    #: Disabled or removed, and the services not told yet (UserAccessEnded).
    access_end_pending: NotRequired[bool]
    created_at: datetime


class ApiKeyDoc(TypedDict):
    _id: str  # the key id, the middle of gpc_<key id>_<secret>
    secret_hash: str
    name: str
    user_id: str | None
    tenant_id: str | None
    role: str
    scopes: list[str] | None  # None: every scope (the bootstrap key)
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    #: A machine key of these inference services alone (ApiKeyCreate.service_ids).
    service_ids: NotRequired[list[str] | None]
    #: The admin who minted it for its user (absent: the user made it).
    created_by: NotRequired[str | None]
    #: The one project it acts in (ApiKeyCreate.project); absent: any its user may.
    project: NotRequired[str | None]


class ConsoleSessionDoc(TypedDict):
    _id: str  # the SHA-256 of the cookie's session id: the id itself is never stored
    source: Literal["user", "key"]  # what signed in, checked again on every request
    source_id: str
    #: A user's password generation at sign-in (authentication.py); absent before it.
    source_version: NotRequired[int]
    #: Opened by a single sign-on (review N7); absent: not.
    sso: NotRequired[bool]
    tenant_id: str | None
    created_at: datetime
    expires_at: datetime


class AuditDoc(TypedDict):
    _id: str  # sorts by time
    tenant_id: str | None
    actor: str
    role: str
    action: str
    resource: str
    result: int
    at: datetime
    published: bool


class InvitationDoc(TypedDict):
    _id: str
    tenant_id: str
    email: str
    role: str
    #: The projects the person joins on accepting (decision 138).
    projects: NotRequired[list[str]]
    #: SHA-256 of the link's secret; the secret itself is never stored.
    token_hash: str
    created_by: str | None
    created_at: datetime
    expires_at: datetime
    status: str  # pending | accepted | revoked
    user_id: NotRequired[str]
    ended_at: NotRequired[datetime]


class SsoConfigDoc(TypedDict):
    _id: str  # the tenant
    #: As the provider's discovery document writes it (ID tokens' `iss`).
    issuer: str
    client_id: str
    #: Fernet, with a key derived from the session secret.
    client_secret_sealed: str
    group_roles: dict[str, str]
    #: A provider group's projects in the tenant (decision 138); absent: none.
    group_projects: NotRequired[dict[str, list[str]]]
    default_role: str | None
    create_users: bool
    cli_sign_in: bool
    #: Absent: true, as before the setting.
    password_sign_in: NotRequired[bool]
    updated_at: datetime


class SsoLoginDoc(TypedDict):
    """A sign-in under way: between the redirect to the provider and its return."""

    _id: str  # SHA-256 of its state
    tenant_id: str
    #: SHA-256 of the secret in the cookie of the browser that began it: the callback
    #: is taken only from that browser (no login CSRF).
    browser_hash: str
    verifier: str
    nonce: str
    redirect_uri: str
    expires_at: datetime
    #: Begun from an invitation's link: the sign-in accepts it.
    invitation_id: NotRequired[str]


class SsoDeviceDoc(TypedDict):
    """A CLI's sign-in under way (device authorization): the user enters a code at
    the provider while the CLI polls the gateway."""

    _id: str  # SHA-256 of the poll token the CLI holds
    tenant_id: str
    device_code_sealed: str
    interval_s: int
    next_poll_at: datetime
    expires_at: datetime
    #: Begun from an invitation's link: the sign-in accepts it.
    invitation_id: NotRequired[str]


class SsoIdentityDoc(TypedDict):
    """A provider's account linked to a user: the issuer and its `sub`, which never
    change, unlike an email."""

    _id: str  # SHA-256 of issuer and subject
    user_id: str
    tenant_id: str
    issuer: str
    subject: str
    linked_at: datetime
