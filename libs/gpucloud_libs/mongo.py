"""MongoDB through PyMongo's async API: one client per process, one database per service.

The local stack runs FerretDB on SQLite, so stores stay within its subset:
single-document atomicity, unique indexes and findAndModify; no transactions,
change streams, TTL or partial indexes, $lookup or $facet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from pymongo import AsyncMongoClient, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

Document = dict[str, Any]
Database = AsyncDatabase[Document]
IndexPlan = Mapping[str, Sequence[IndexModel]]
Collection = AsyncCollection
DocumentT = TypeVar("DocumentT", bound=Mapping[str, Any])


def typed(database: Database, name: str, document: type[DocumentT]) -> Collection[DocumentT]:
    """A collection whose documents are `document` (a TypedDict): what a store reads
    and writes is checked field by field."""
    return cast(Collection[DocumentT], database[name])


def create_client(uri: str, *, app_name: str) -> AsyncMongoClient[Document]:
    return AsyncMongoClient(
        uri,
        appname=app_name,
        tz_aware=True,
        serverSelectionTimeoutMS=5000,
        connectTimeoutMS=5000,
        uuidRepresentation="standard",
    )


async def ensure_indexes(database: Database, plan: IndexPlan) -> None:
    """Create the indexes of `plan` ({collection: [IndexModel, ...]}) that do not exist yet.

    Existing ones are skipped by name rather than re-sent: FerretDB 1.24 breaks
    the connection on a createIndexes for an index that already exists.
    """
    for collection, indexes in plan.items():
        existing = set(await database[collection].index_information())
        missing = [index for index in indexes if index.document["name"] not in existing]
        if missing:
            await database[collection].create_indexes(missing)


async def ping(database: Database) -> None:
    await database.command("ping")
