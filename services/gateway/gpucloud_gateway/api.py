"""Public HTTP routes of the gateway."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .schemas import Principal
from .service import authenticate
from .store import ApiKeyStore

router = APIRouter(prefix="/v1")
_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer gpc_...`")


async def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    store: ApiKeyStore = request.app.state.api_keys
    return await authenticate(store, credentials.credentials if credentials else None)


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]


@router.get("/whoami", summary="The identity behind the presented API key")
async def whoami(principal: CurrentPrincipal) -> Principal:
    return principal
