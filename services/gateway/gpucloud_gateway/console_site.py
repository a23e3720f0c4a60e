"""The web console's files, served at `/` on the gateway's own host.

The console is a single-page app (console/ in the repository, built by `make up`):
`index.html` for every page path, the hashed bundles under `/assets/` cached for a
year. Every answer carries a content security policy that allows scripts and styles
from the gateway alone and calls to the gateway and the object store (uploads go
straight to presigned URLs), and forbids framing.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, PlainTextResponse

from gpucloud_libs.errors import NotFound

from .settings import GatewaySettings

#: Paths of the API and the service itself: never the console's.
_NOT_CONSOLE = ("v1/", "docs", "openapi.json", "healthz", "readyz", "metrics", "_gpucloud/")


def _policy(settings: GatewaySettings) -> str:
    connect = " ".join(["'self'", *settings.console_connect_sources])
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src {connect}; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'self'; object-src 'none'"
    )


def _asset(path: Path, request: Request, headers: dict[str, str]) -> Response:
    """A hashed bundle: cached for good, gzipped (made at build) where the browser takes it."""
    headers = {**headers, "cache-control": "public, max-age=31536000, immutable"}
    packed = path.with_name(path.name + ".gz")
    if "gzip" in request.headers.get("accept-encoding", "") and packed.is_file():
        media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        headers |= {"content-encoding": "gzip", "vary": "accept-encoding"}
        return FileResponse(packed, media_type=media_type, headers=headers)
    return FileResponse(path, headers={**headers, "vary": "accept-encoding"})


def console_router(settings: GatewaySettings) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    root = Path(settings.console_dir).resolve() if settings.console_dir else None
    headers = {
        "content-security-policy": _policy(settings),
        "x-content-type-options": "nosniff",
        "referrer-policy": "same-origin",
    }

    @router.api_route("/{path:path}", methods=["GET", "HEAD"])
    async def console_file(path: str, request: Request) -> Response:
        if path.startswith(_NOT_CONSOLE):
            raise NotFound(f"no route {request.url.path}")
        if root is None or not (root / "index.html").is_file():
            return PlainTextResponse(
                "The web console is not built: `make up` builds it (console/), "
                "or set GPUCLOUD_CONSOLE_DIR to a built console.",
                status_code=404,
                headers=headers,
            )
        wanted = (root / path).resolve()
        if path and wanted.is_relative_to(root) and wanted.is_file():
            if not path.startswith("assets/"):
                return FileResponse(wanted, headers={**headers, "cache-control": "no-cache"})
            return _asset(wanted, request, headers)
        if path.startswith("assets/"):
            raise NotFound(f"no console file {path!r}")
        # A page path (/instances, /storages/models): the app routes it in the browser.
        return FileResponse(root / "index.html", headers={**headers, "cache-control": "no-cache"})

    return router
