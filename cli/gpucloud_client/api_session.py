"""The client's HTTP session: one endpoint and one credential, each call's problem
raised as `ApiError`, what the API asks to be retried retried, pages followed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

import httpx

from .errors import ApiError, Unreachable

#: Refusals that say "try again shortly": the rate limiter, and a tenant the services
#: have not heard of yet (it reaches them by event, a moment after its creation).
RETRYABLE = {(429, "rate_limited"), (409, "tenant_not_ready")}
#: How long a call keeps retrying those before it gives up and raises.
RETRY_FOR_S = 30.0

Params = dict[str, Any]


class ApiSession:
    """One endpoint and one credential (an API key or a session token; "" for none)."""

    def __init__(
        self,
        endpoint: str,
        api_key: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._credential = api_key
        # No credential (""): the few calls made before having one (accepting an invitation).
        authorization = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=f"{self.endpoint}/v1",
            headers={**authorization, "User-Agent": "gpucloud-cli/0.1"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- the HTTP session --------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One call; the decoded JSON answer (None for 204). Retries what the API asks to
        be retried (`Retry-After`), up to RETRY_FOR_S."""
        response = self._send(method, path, json=json, params=params, headers=headers,
                              timeout_s=timeout_s)  # fmt: skip
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> httpx.Response:
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                response = self._http.request(
                    method, path, json=json, params=_clean(params), headers=headers,
                    timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT,
                )  # fmt: skip
            except httpx.TransportError as error:
                raise Unreachable(f"{self.endpoint}: {error or type(error).__name__}") from error
            if response.is_success:
                return response
            problem = _problem(response)
            wait_s = _retry_after(response)
            if (
                problem.status,
                problem.code,
            ) not in RETRYABLE or time.monotonic() + wait_s > deadline:
                raise problem
            time.sleep(wait_s)

    @contextmanager
    def stream(self, path: str, *, params: Params | None = None) -> Iterator[httpx.Response]:
        """A streamed GET (a log that grows): the response, to read with `iter_text`."""
        # A followed log may stay quiet for long: only the connect is bounded.
        timeout = httpx.Timeout(None, connect=10.0)
        request = self._http.build_request("GET", path, params=_clean(params), timeout=timeout)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as error:
            raise Unreachable(f"{self.endpoint}: {error or type(error).__name__}") from error
        try:
            if not response.is_success:
                response.read()
                raise _problem(response)
            yield response
        finally:
            response.close()

    def pages(self, path: str, params: Params | None = None) -> Iterator[Any]:
        """Every item of a cursor-paged list (`items`, `nextCursor`)."""
        cursor: str | None = None
        while True:
            page = self.request("GET", path, params={**(params or {}), "cursor": cursor})
            yield from page["items"]
            cursor = page.get("nextCursor")
            if not cursor:
                return

    def pages_after(self, path: str, id_field: str, limit: int) -> Iterator[Any]:
        """Every item of a list paged by `after` (the last id seen) rather than a cursor:
        a page shorter than `limit` is the last."""
        after: str | None = None
        while True:
            page = self.request("GET", path, params={"after": after, "limit": limit})
            yield from page
            if len(page) < limit:
                return
            after = page[-1][id_field]


def _id(value: str) -> str:
    """A path segment: ids never hold a slash, so one that does is refused here rather
    than sent to another route."""
    if not value or "/" in value or value in {".", ".."}:
        raise ValueError(f"not an id: {value!r}")
    return value


def _items(answer: Any) -> list[dict[str, Any]]:
    """A list answer's items, whether the API sends a bare list or a page."""
    return list(answer["items"] if isinstance(answer, dict) else answer)


def _clean(params: Params | None) -> Params | None:
    return {k: v for k, v in params.items() if v is not None} if params else None


def _problem(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"detail": response.text[:500]}
    return ApiError(response.status_code, body)


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.1, min(float(response.headers.get("retry-after", "1")), 10.0))
    except ValueError:
        return 1.0
