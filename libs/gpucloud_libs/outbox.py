"""Retrying publishes that failed after their write, without rescanning every document.

Services write a document first and publish its event after (the write is the
truth, the event follows). When a publish fails, the document stays marked
unpublished and the service's periodic sweep retries it. Scanning a growing
collection for `published: false` on every sweep would cost more each day, so
the sweep scans once after a start (a crash may have left anything behind) and
afterwards retries only the ids whose publish failed in this process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .mongo import Document


class PublishRetries:
    def __init__(self) -> None:
        self._failed: set[str] | None = None  # None: no sweep since the start yet

    def failed(self, document_id: str) -> None:
        if self._failed is not None:
            self._failed.add(document_id)

    async def sweep(
        self,
        *,
        all_unpublished: Callable[[], Awaitable[list[Document]]],
        get: Callable[[str], Awaitable[Document | None]],
        publish: Callable[[Document], Awaitable[None]],
    ) -> None:
        """Publish what is pending; anything failing again is kept for the next sweep."""
        if self._failed is None:
            self._failed = set()
            pending = await all_unpublished()
        else:
            ids, self._failed = self._failed, set()
            found = [await get(document_id) for document_id in sorted(ids)]
            pending = [doc for doc in found if doc is not None and not doc.get("published")]
        for doc in pending:
            try:
                await publish(doc)
            except Exception:
                self._failed.add(doc["_id"])
                raise
