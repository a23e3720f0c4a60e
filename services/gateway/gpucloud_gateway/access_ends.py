"""What a user holds outside the gateway's keys and sessions (their kubectl credential,
`gpucloud kubeconfig`) ends with what allowed it (review N4): the user's access, a
password change, and any key of theirs revoked or ended with the admin who minted it.
The instances service ends the user's accounts at `UserAccessEnded`; the user may ask
for a new kubeconfig at once, with what still allows it.

Marked on the user first, so the sweep (`republish`) retries what did not get out."""

from __future__ import annotations

import logging
import time

from faststream.kafka import KafkaBroker

from gpucloud_libs.events import UserAccessEnded
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.topics import TENANTS

from .store import UserStore

log = logging.getLogger(__name__)


class AccessEnds:
    def __init__(self, users: UserStore, broker: KafkaBroker, *, source: str) -> None:
        self._users = users
        self._broker = broker
        self._source = source

    async def end(self, user_id: str, tenant_id: str | None) -> None:
        """Tell the services the user's credentials outside the gateway end."""
        if tenant_id is None:
            return
        await self._users.set_fields(user_id, {"access_end_pending": True})
        try:
            await publish_event(
                self._broker, TENANTS, UserAccessEnded(tenant_id=tenant_id, user_id=user_id),
                source=self._source, event_id=f"access-ended-{user_id}-{time.time_ns()}",
            )  # fmt: skip
        except Exception:
            log.warning("a user's access end not published yet", extra={"user": user_id},
                        exc_info=True)  # fmt: skip
            return
        await self._users.set_fields(user_id, {"access_end_pending": False})

    async def republish(self) -> None:
        for doc in await self._users.access_ends_pending():
            await self.end(doc["_id"], doc.get("tenant_id"))
