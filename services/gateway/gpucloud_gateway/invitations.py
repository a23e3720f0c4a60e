"""Invitations: a tenant admin invites an email with a role and, if they like, to some
of the tenant's projects; the link's holder sets a name and a password, or signs in
through the tenant's single sign-on with that email, and becomes that user, a member
of those projects. The link's secret is shown once and kept only as a hash; a
link works once, until it expires, and an admin may revoke it."""

from __future__ import annotations

import secrets
from datetime import timedelta

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import Conflict, Gone, NotFound

from .credentials import hash_secret
from .documents import InvitationDoc
from .project_schemas import ProjectMemberships
from .schemas import (
    Invitation,
    InvitationAcceptance,
    InvitationCreate,
    InvitationCreated,
    InvitationPreview,
    Principal,
    User,
    UserCreate,
)
from .sso_store import SsoStore
from .store import InvitationStore, TenantStore, UserStore
from .users import Users

#: The console's page that accepts an invitation; the secret follows in the fragment,
#: which browsers never send to a server (it stays out of every access log).
JOIN_PATH = "/join#"


def invitation_view(doc: InvitationDoc) -> Invitation:
    status = doc["status"]
    if status == "pending" and aware(doc["expires_at"]) <= now():
        status = "expired"
    return Invitation(
        invitation_id=doc["_id"], tenant_id=doc["tenant_id"], email=doc["email"],
        role=doc["role"], projects=doc.get("projects") or [], status=status,
        created_by=doc["created_by"], created_at=doc["created_at"],
        expires_at=doc["expires_at"], user_id=doc.get("user_id"),
    )  # fmt: skip


class Invitations:
    def __init__(
        self, invitations: InvitationStore, users: Users, user_store: UserStore,
        tenants: TenantStore, sso: SsoStore, projects: ProjectMemberships,
    ) -> None:  # fmt: skip
        self._invitations = invitations
        self._users = users
        self._user_store = user_store
        self._tenants = tenants
        self._sso = sso
        self._projects = projects

    async def create(self, principal: Principal, body: InvitationCreate) -> InvitationCreated:
        assert principal.tenant_id is not None
        email = body.email.lower()
        if await self._user_store.by_email(email) is not None:
            raise Conflict(f"a user with the email {email!r} already exists")
        projects = await self._projects.check_named(principal.tenant_id, body.projects)
        token, at = f"gpi_{secrets.token_urlsafe(32)}", now()
        doc: InvitationDoc = {
            "_id": f"inv-{secrets.token_hex(8)}", "tenant_id": principal.tenant_id,
            "email": email, "role": body.role, "projects": list(projects),
            "token_hash": hash_secret(token),
            "created_by": principal.user_id, "created_at": at,
            "expires_at": at + timedelta(days=body.days), "status": "pending",
        }  # fmt: skip
        await self._invitations.insert(doc)
        return InvitationCreated(
            invitation=invitation_view(doc), token=token, path=f"{JOIN_PATH}{token}"
        )

    async def list(self, principal: Principal) -> list[Invitation]:
        assert principal.tenant_id is not None
        return [
            invitation_view(doc) for doc in await self._invitations.of_tenant(principal.tenant_id)
        ]

    async def revoke(self, principal: Principal, invitation_id: str) -> None:
        doc = await self._invitations.get(invitation_id)
        if doc is None or doc["tenant_id"] != principal.tenant_id:
            raise NotFound(f"invitation {invitation_id!r} does not exist")
        if doc["status"] == "accepted":
            raise Conflict(
                f"invitation {invitation_id!r} was accepted; remove the user instead",
                user_id=doc.get("user_id"),
            )
        if not await self._invitations.end(invitation_id, "revoked"):
            raise Conflict(f"invitation {invitation_id!r} is no longer pending")

    async def preview(self, token: str) -> InvitationPreview:
        doc, tenant_name = await self.usable(token)
        return InvitationPreview(
            email=doc["email"], tenant_id=doc["tenant_id"], tenant_name=tenant_name,
            role=doc["role"], projects=doc.get("projects") or [], expires_at=doc["expires_at"],
            single_sign_on=await self._sso.config(doc["tenant_id"]) is not None,
        )  # fmt: skip

    async def accept(self, body: InvitationAcceptance) -> User:
        """The invited user, made with the name and password given. A second acceptance
        of the same link finds it used (410); two at once, the email taken (409)."""
        doc, _ = await self.usable(body.token)
        return await self._accepted(
            doc, UserCreate(email=doc["email"], name=body.name, role=doc["role"],
                            password=body.password),
        )  # fmt: skip

    async def invitation(self, invitation_id: str) -> InvitationDoc | None:
        return await self._invitations.get(invitation_id)

    async def accept_signed_in(self, invitation_id: str, name: str) -> User:
        """The invited user, made without a password: the tenant's single sign-on
        vouched for the invited email (the caller checked it)."""
        doc = await self._invitations.get(invitation_id)
        if doc is None:
            raise Gone("this invitation was withdrawn")
        await self._check(doc)
        body = UserCreate(email=doc["email"], name=name, role=doc["role"])
        return await self._accepted(doc, body)

    async def _accepted(self, doc: InvitationDoc, body: UserCreate) -> User:
        """A second acceptance of the same link finds it used (410); two at once, the
        email taken (409)."""
        if not await self._invitations.end(doc["_id"], "accepted"):
            raise Gone("this invitation was just used or revoked")
        try:
            user = await self._users.insert(body, tenant_id=doc["tenant_id"])
        except Conflict:
            await self._invitations.reopen(doc["_id"])
            raise
        await self._invitations.record_user(doc["_id"], user.user_id)
        await self._projects.set_membership(
            doc["tenant_id"], user.user_id, join=set(doc.get("projects") or [])
        )
        return user

    async def usable(self, token: str) -> tuple[InvitationDoc, str]:
        """The invitation of a link that may still be accepted, and its tenant's name."""
        doc = await self._invitations.by_token_hash(hash_secret(token))
        if doc is None:
            raise NotFound("no invitation has this link; check that it was copied whole")
        return doc, await self._check(doc)

    async def _check(self, doc: InvitationDoc) -> str:
        """Its tenant's name, if the invitation may still be accepted; a 410 saying why
        not otherwise."""
        view = invitation_view(doc)
        if view.status == "accepted":
            raise Gone("this invitation was already used; sign in instead")
        if view.status == "revoked":
            raise Gone("this invitation was revoked; ask your tenant's admin for a new one")
        if view.status == "expired":
            raise Gone(
                f"this invitation expired at {view.expires_at.isoformat()}; ask your "
                "tenant's admin for a new one"
            )
        tenant = await self._tenants.get(doc["tenant_id"])
        if tenant is None or tenant["status"] == "deleted":
            raise Gone(f"tenant {doc['tenant_id']!r} no longer exists")
        # An invitation is its admin's word: it goes with their access.
        admin = await self._user_store.get(doc["created_by"] or "")
        if admin is None or admin["status"] != "active" or admin["role"] != "tenant-admin":
            raise Gone("the admin who sent this invitation no longer has access; ask another")
        return tenant["name"]
