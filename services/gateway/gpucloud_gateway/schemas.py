"""Request and response models of the gateway's own routes: tenants, users, API
keys, tokens and the audit log. camelCase on the wire, like the rest of the API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Self

from pydantic import AwareDatetime, Field, SecretStr, model_validator

from gpucloud_libs.http import ApiModel
from gpucloud_libs.identity import Role
from gpucloud_libs.naming import ID_PATTERN, PROJECT_ID_PATTERN

#: What an API key or token may do, on top of what its role allows.
Scope = Literal[
    "instances:read",
    "instances:write",
    "instances:connect",  # open instance URLs
    "storage:read",
    "storage:write",
    "billing:read",
    "billing:write",
    "monitoring:read",
    "monitoring:write",
    "admin:read",  # tenants, users, keys, audit
    "admin:write",
]
ALL_SCOPES: tuple[Scope, ...] = Scope.__args__  # type: ignore[attr-defined]

#: Tenant ids name Kubernetes namespaces and instance hosts, so they are DNS labels.
#: A tenant id is a field of its instances' hosts (libs naming): no `--` in it.
TenantId = Annotated[str, Field(pattern=ID_PATTERN, max_length=32)]
#: An inference service's id, as the instances service takes it.
ServiceId = Annotated[str, Field(pattern=ID_PATTERN, max_length=40)]
Email = Annotated[str, Field(pattern=r"^[^@\s]{1,64}@[^@\s]{1,190}\.[^@\s]{1,63}$", max_length=254)]
Password = Annotated[SecretStr, Field(min_length=12, max_length=256)]
Name = Annotated[str, Field(min_length=1, max_length=128)]


class QuotaLimits(ApiModel):
    """A tenant's ceilings. Enforced by the services that own each resource."""

    max_gpus: int = Field(ge=0, le=1_000_000)
    max_instances: int = Field(ge=0, le=1_000_000)
    max_storage_bytes: int = Field(ge=0, le=2**62)
    #: Spend per calendar month, in cents; unset means no cap.
    monthly_spend_cap_cents: int | None = Field(default=None, ge=0, le=2**62)
    #: GPUs beyond `maxGpus` the tenant's batch jobs may borrow while nobody's
    #: guaranteed work needs them; taken back by preemption (docs/queue.md).
    borrow_gpus: int = Field(default=0, ge=0, le=1_000_000)


class SelfQuota(ApiModel):
    """A tenant admin's own tighter limits; unset fields follow the platform's."""

    max_gpus: int | None = Field(default=None, ge=0, le=1_000_000)
    max_instances: int | None = Field(default=None, ge=0, le=1_000_000)
    max_storage_bytes: int | None = Field(default=None, ge=0, le=2**62)
    monthly_spend_cap_cents: int | None = Field(default=None, ge=0, le=2**62)


class UserLimits(ApiModel):
    """One user's own ceilings inside the tenant's quota (tenant admin); unset fields
    leave the user held to the tenant's quota alone."""

    #: GPUs the user's instances, jobs and services may hold at once.
    max_gpus: int | None = Field(default=None, ge=0, le=1_000_000)
    #: What the user's workloads may cost per calendar month, in cents: at it, the
    #: user's workloads stop and none of theirs start until the month ends.
    monthly_spend_cents: int | None = Field(default=None, ge=0, le=2**62)


class RateLimit(ApiModel):
    """A token bucket: a steady rate, and a burst allowed on top of it."""

    requests_per_s: float = Field(gt=0, le=100_000)
    burst: int = Field(ge=1, le=1_000_000)


class UserCreate(ApiModel):
    email: Email
    name: Name
    role: Role = "tenant-user"
    #: Lets the user sign in for a short-lived token; without one, API keys only.
    password: Password | None = None


class UserUpdate(ApiModel):
    name: Name | None = None
    role: Role | None = None
    #: Disabling a user revokes every API key they hold.
    status: Literal["active", "disabled"] | None = None
    password: Password | None = None


class User(ApiModel):
    user_id: str = Field(alias="userID")
    tenant_id: str | None = Field(alias="tenantID")
    email: str
    name: str
    role: Role
    status: Literal["active", "disabled"]
    has_password: bool
    created_at: datetime


class InvitationCreate(ApiModel):
    email: Email
    #: The role the person gets on accepting.
    role: Literal["tenant-user", "tenant-admin"] = "tenant-user"
    #: The tenant's projects the person joins on accepting (every user is in `default`).
    projects: list[Annotated[str, Field(pattern=PROJECT_ID_PATTERN)]] = Field(
        default_factory=list, max_length=50
    )
    #: How long the link works.
    days: int = Field(default=7, ge=1, le=30)


class Invitation(ApiModel):
    invitation_id: str = Field(alias="invitationID")
    tenant_id: str = Field(alias="tenantID")
    email: str
    role: Role
    #: The projects the person joins on accepting.
    projects: list[str] = Field(default_factory=list)
    #: `pending` until accepted; `expired` past `expiresAt`; `revoked` by an admin.
    status: Literal["pending", "accepted", "expired", "revoked"]
    created_by: str | None
    created_at: datetime
    expires_at: datetime
    #: The user the acceptance made.
    user_id: str | None = Field(default=None, alias="userID")


class InvitationCreated(ApiModel):
    invitation: Invitation
    #: The secret of the link, shown this once (the gateway keeps only its hash).
    token: str
    #: Where the person accepts it, on this gateway: append it to the console's URL.
    path: str


class InvitationToken(ApiModel):
    token: Annotated[str, Field(min_length=10, max_length=128)]


class InvitationPreview(ApiModel):
    """What the link's holder sees before accepting: who invites them, and as what."""

    email: str
    tenant_id: str = Field(alias="tenantID")
    tenant_name: str
    role: Role
    #: The projects they join on accepting.
    projects: list[str] = Field(default_factory=list)
    expires_at: datetime
    #: The tenant signs in through its provider: the invitation may be accepted so.
    single_sign_on: bool = Field(alias="singleSignOn")


class InvitationAcceptance(InvitationToken):
    name: Name
    password: Password


class ApiKeyCreate(ApiModel):
    name: Name
    #: Defaults to the caller's role; a key never gets more than its holder.
    role: Role | None = None
    #: Defaults to every scope the role allows.
    scopes: list[Scope] | None = Field(default=None, min_length=1, max_length=len(ALL_SCOPES))
    #: Defaults to 90 days from now; at most a year ahead.
    expires_at: AwareDatetime | None = None
    #: A machine key for these inference services of the tenant alone: it calls their
    #: URLs and nothing else (its one scope is `instances:connect`).
    service_ids: list[ServiceId] | None = Field(
        default=None, alias="serviceIDs", min_length=1, max_length=32
    )
    #: A key of this one project (decision 139): a tenant-user key that starts, sees
    #: and reaches that project's work alone, while its user is a member of the
    #: project. A project key makes keys of its own project only.
    project: Annotated[str, Field(pattern=PROJECT_ID_PATTERN)] | None = None

    @model_validator(mode="after")
    def _service_keys_only_connect(self) -> Self:
        if self.service_ids is not None and self.scopes not in (None, ["instances:connect"]):
            raise ValueError("a key for inference services has the one scope instances:connect")
        if self.service_ids is not None and self.project is not None:
            raise ValueError("a key for inference services names no project")
        return self


class ApiKey(ApiModel):
    key_id: str = Field(alias="keyID")
    name: str
    #: Unset for the bootstrap platform admin's key.
    user_id: str | None = Field(alias="userID")
    tenant_id: str | None = Field(alias="tenantID")
    role: Role
    scopes: list[Scope]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None
    service_ids: list[str] | None = Field(default=None, alias="serviceIDs")
    #: The admin who minted it for its user; None: its user made it.
    created_by: str | None = None
    #: The one project it acts in; None: any its user may.
    project: str | None = None


class ApiKeyCreated(ApiKey):
    #: The whole key. Shown this once; only its hash is kept.
    secret: str


#: A tenant's weight in the admission queue's fair share: 2 gets twice the GPUs of 1
#: while both wait (docs/queue.md).
QueueWeight = Annotated[float, Field(gt=0, le=100)]


class TenantCreate(ApiModel):
    tenant_id: TenantId = Field(alias="tenantID")
    name: Name
    limits: QuotaLimits
    rate_limit: RateLimit | None = None
    queue_weight: QueueWeight = 1.0
    #: The tenant's first admin, who manages the rest of its users.
    admin: UserCreate

    @model_validator(mode="after")
    def _admin_is_tenant_admin(self) -> Self:
        if self.admin.role != "tenant-admin":
            raise ValueError("the first user of a tenant must be a tenant-admin")
        return self


class TenantUpdate(ApiModel):
    name: Name | None = None
    #: A suspended tenant can read but not change anything.
    status: Literal["active", "suspended"] | None = None
    limits: QuotaLimits | None = None
    rate_limit: RateLimit | None = None
    queue_weight: QueueWeight | None = None


class Tenant(ApiModel):
    tenant_id: str = Field(alias="tenantID")
    name: str
    status: Literal["active", "suspended", "deleted"]
    #: Set by the platform admin.
    limits: QuotaLimits
    #: Set by the tenant admin, within `limits`.
    self_quota: SelfQuota
    #: What the services enforce: the tighter of the two.
    quota: QuotaLimits
    rate_limit: RateLimit
    queue_weight: float
    #: The limits of its users that have any, by user id.
    user_limits: dict[str, UserLimits] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime


class TenantCreated(ApiModel):
    tenant: Tenant
    admin: User
    admin_key: ApiKeyCreated


class TokenRequest(ApiModel):
    """Sign in with an email and password, or send none to exchange the bearer API key."""

    email: Email | None = None
    password: SecretStr | None = Field(default=None, max_length=256)
    ttl_s: int = Field(default=3600, ge=60, le=43_200)

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if (self.email is None) != (self.password is None):
            raise ValueError("send both email and password, or neither")
        return self


class TokenIssued(ApiModel):
    token: str
    token_type: Literal["Bearer"] = "Bearer"  # noqa: S105 - the scheme's name
    expires_at: datetime


class ConsoleSignIn(ApiModel):
    """Sign in to the web console with an email and password, or with an API key."""

    email: Email | None = None
    password: SecretStr | None = Field(default=None, max_length=256)
    api_key: SecretStr | None = Field(default=None, max_length=1024)

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        with_password = self.email is not None and self.password is not None
        if (self.email is None) != (self.password is None):
            raise ValueError("send both email and password")
        if with_password == (self.api_key is not None):
            raise ValueError("send an email and password, or an apiKey")
        return self


class ConsoleSession(ApiModel):
    """The signed-in console: who it acts as, and the token its changes must carry."""

    csrf_token: str = Field(alias="csrfToken")
    expires_at: datetime
    principal: Principal


class InstanceSession(ApiModel):
    """A link that opens an instance URL in a browser: it sets the session cookie."""

    url: str
    expires_at: datetime


class AuditEntry(ApiModel):
    audit_id: str = Field(alias="auditID")
    tenant_id: str | None = Field(alias="tenantID")
    #: The user's id, or the key's for a key without a user.
    actor: str
    #: The user's name (or that key's) as it is now; None when it is gone.
    actor_name: str | None = None
    role: Role
    #: Method and route, such as `POST /v1/gpu-instances`.
    action: str
    #: The path acted on, such as `/v1/gpu-instances/web-1`.
    resource: str
    #: The HTTP status the caller got.
    result: int
    at: datetime


class AuditPage(ApiModel):
    items: list[AuditEntry]
    next_cursor: str | None = None


class Principal(ApiModel):
    """The authenticated caller, as every route and downstream service sees it."""

    #: The user id, or the key id for a key without a user (the bootstrap admin).
    subject: str
    user_id: str | None = Field(alias="userID")
    key_id: str | None = Field(alias="keyID")
    role: Role
    tenant_id: str | None = Field(alias="tenantID")
    scopes: list[Scope]
    via: Literal["api_key", "token", "session_cookie", "console"]
    #: Set for a machine key of some inference services: it reaches their URLs only.
    service_ids: list[str] | None = Field(default=None, alias="serviceIDs")
    #: Set for a key of one project: it acts in that project alone (decision 139).
    project: str | None = None
    #: The projects whose work it sees and acts on (decision 142); None: every one.
    projects: tuple[str, ...] | None = None
    #: Signed in through the tenant's provider: the keys it mints live a day at most,
    #: so leaving the provider ends them within it (review N7; never shown).
    sso: bool = Field(default=False, exclude=True)
    #: When the API key it acts by expires (None: a user's sign-in, or a key without
    #: end): no key it mints outlives it (never shown).
    expires_at: datetime | None = Field(default=None, exclude=True)
    #: A signed-in user's password generation: what a token minted from this
    #: principal carries, so a password change ends it (never shown).
    source_version: int = Field(default=0, exclude=True)
