"""Each object storage signs its presigned URLs with a key pair of its own.

The pair is a service account of the storage service's MinIO user, limited to
the storage's bucket, made on the first presign and kept sealed in the
storage's document (libs sealing, with GPUCLOUD_STORAGE_SECRETS_KEY). So a
tenant's URL names that key, never the service's; and revoking the key (the
`revoke-urls` route, or deleting the storage) voids every URL signed with it
at once, however long it was meant to last.
"""

from __future__ import annotations

import secrets

from gpucloud_libs.sealing import SecretBox

from .accessors import access_key
from .backend import Credential, ObjectBackend
from .documents import PresignerDoc, StorageDoc
from .store import StorageStore


class Presigners:
    def __init__(self, backend: ObjectBackend, storages: StorageStore, box: SecretBox) -> None:
        self._backend = backend
        self._storages = storages
        self._box = box

    async def signer(self, doc: StorageDoc) -> Credential:
        """The storage's presigning key pair, made if it has none (or one this service
        can no longer open, sealed under a key since replaced)."""
        held = doc.get("presigner")
        if held is not None:
            secret = self._box.open(held["secret"])
            if secret is not None:
                return Credential(held["access_key"], secret)
        credential = Credential(access_key(), secrets.token_urlsafe(30))
        await self._backend.create_credential(
            access_key=credential.access_key, secret_key=credential.secret_key,
            bucket=doc["bucket"], mode="read-write", expires_at=None,
            description=f"presigned URLs of {doc['_id']}",
        )  # fmt: skip
        sealed = PresignerDoc(
            access_key=credential.access_key, secret=self._box.seal(credential.secret_key)
        )
        if await self._storages.set_presigner(doc["_id"], expected=held, presigner=sealed):
            if held is not None:
                await self._backend.revoke_credential(held["access_key"])
            return credential
        # Another request made one first: use that one, drop ours.
        await self._backend.revoke_credential(credential.access_key)
        fresh = await self._storages.get(doc["_id"])
        if fresh is None or fresh.get("presigner") is None:
            raise RuntimeError(f"storage {doc['_id']} lost its presigner while making one")
        return await self.signer(fresh)

    async def revoke(self, doc: StorageDoc) -> None:
        """Void every URL signed so far; the next presign makes a new key pair."""
        held = doc.get("presigner")
        if held is None:
            return
        await self._backend.revoke_credential(held["access_key"])
        await self._storages.set_presigner(doc["_id"], expected=held, presigner=None)
