"""The API's shapes of single sign-on: a tenant's provider, and a CLI's sign-in."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, SecretStr

from gpucloud_libs.http import ApiModel
from gpucloud_libs.naming import PROJECT_ID_PATTERN


class SsoConfigSet(ApiModel):
    """A tenant's single sign-on: its OpenID Connect provider and who may come in."""

    issuer: Annotated[str, Field(min_length=8, max_length=512, pattern=r"^https?://")]
    client_id: Annotated[str, Field(min_length=1, max_length=256)] = Field(alias="clientID")
    client_secret: Annotated[SecretStr, Field(min_length=1, max_length=512)]
    #: A provider group's role in the tenant; the highest of a user's groups wins.
    group_roles: dict[str, Literal["tenant-user", "tenant-admin"]] = Field(
        default_factory=dict, max_length=100
    )
    #: A provider group's projects in the tenant: at each sign-in the user joins the
    #: projects of their groups, and leaves the mapped ones of groups they left.
    group_projects: dict[str, list[Annotated[str, Field(pattern=PROJECT_ID_PATTERN)]]] = Field(
        default_factory=dict, max_length=100
    )
    #: The role of a user none of whose groups is mapped; None refuses them.
    default_role: Literal["tenant-user", "tenant-admin"] | None = None
    #: Whether a first sign-in makes the user; otherwise an admin adds them first.
    create_users: bool = True
    #: Whether the CLI may sign in with a code entered at the provider (the device
    #: grant). Off by default: anyone can ask for a code and send it to a member,
    #: who would sign the sender in by entering it (device-code phishing).
    cli_sign_in: bool = Field(default=False, alias="cliSignIn")
    #: Whether the tenant's users may still sign in with a password; off, the
    #: provider alone lets them in, so leaving it ends their sign-ins (review N7).
    password_sign_in: bool = True


class SsoDeviceStarted(ApiModel):
    """A CLI's sign-in begun: the user enters `user_code` at `verification_uri` while
    the CLI polls with `poll_token` every `interval` seconds."""

    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: int
    interval: int
    poll_token: str


class SsoDevicePoll(ApiModel):
    poll_token: Annotated[str, Field(min_length=16, max_length=128)]


class SsoDeviceResult(ApiModel):
    """`pending` (poll again in `interval` seconds) or `signed_in` with a short-lived
    token of the user."""

    status: Literal["pending", "signed_in"]
    interval: int | None = None
    email: str | None = None
    token: str | None = None
    expires_at: datetime | None = None


class SsoJoinStarted(ApiModel):
    """Where the browser goes to accept an invitation by signing in at the provider."""

    provider_url: str = Field(alias="providerURL")


class SsoConfig(ApiModel):
    tenant_id: str = Field(alias="tenantID")
    issuer: str
    client_id: str = Field(alias="clientID")
    group_roles: dict[str, str]
    group_projects: dict[str, list[str]]
    default_role: str | None
    create_users: bool
    cli_sign_in: bool = Field(alias="cliSignIn")
    password_sign_in: bool
    #: What to register at the provider as the client's redirect URI.
    redirect_uri: str
