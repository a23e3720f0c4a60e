"""Smaller holes below the API: path decoding through the gateway, sign-in timing."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gpucloud_gateway import credentials

from .platform import Platform, assert_problem, bearer


async def test_a_double_encoded_slash_stays_inside_its_path_segment(platform: Platform) -> None:
    """The gateway decodes a path once to match its route; the service must see the same
    path, not decode `%252F` a second time into a `/` that reaches another route."""
    account = await platform.tenant()
    response = await platform.http.get(
        "/v1/storages/a%252F..%252Fattachments", headers=bearer(account.admin_key)
    )
    body = assert_problem(response, 404, "not_found")
    assert body["detail"] == "storage 'a%2F..%2Fattachments' not found"


def test_an_unknown_email_costs_the_same_scrypt_as_a_known_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stored = credentials.hash_password("correct horse battery")
    real_scrypt = hashlib.scrypt
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> bytes:
        calls.append(1)
        return real_scrypt(*args, **kwargs)

    credentials.sign_in_matches("warm the stand-in hash up", None)
    monkeypatch.setattr(hashlib, "scrypt", counted)
    assert credentials.sign_in_matches("correct horse battery", stored)
    assert not credentials.sign_in_matches("wrong", stored)
    assert not credentials.sign_in_matches("correct horse battery", None)
    assert len(calls) == 3  # one each: a miss does the work a hit does
