"""The API key a sign-in leaves on this machine: `gpucloud join` and `gpucloud login
--sso` sign in with a short-lived token, mint the user a key named after this host
with it, and store that key as a profile (as `login` stores a key it is given)."""

from __future__ import annotations

import socket

from gpucloud_client import Client

from . import config
from .session import Session


def store_machine_key(session: Session, endpoint: str, token: str, profile: str | None) -> str:
    """Mint the key with `token` and store it; returns the profile's name."""
    with Client(endpoint, token) as client:
        key = client.create_key({"name": f"gpucloud CLI on {socket.gethostname()}"})
    name = profile or session.profile_name or config.profiles()[0]
    config.save(config.Profile(name, endpoint, key["secret"]))
    return name
