"""Profiles: the endpoints and API keys `gpucloud login` stored, one per cloud or tenant.

The file is `$GPUCLOUD_CONFIG`, else `$XDG_CONFIG_HOME/gpucloud/config.json`, else
`~/.config/gpucloud/config.json`. It holds API keys, so it is created with mode 0600 and
rewritten whole through a file of the same mode. `GPUCLOUD_ENDPOINT` and
`GPUCLOUD_API_KEY` override the profile, for scripts and CI.

A stored key goes only to the endpoint it was stored for: `GPUCLOUD_ENDPOINT` naming
another one needs `GPUCLOUD_API_KEY` beside it. And no key crosses a network in clear:
an endpoint is `https://`, or `http://` on a loopback address.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

DEFAULT_PROFILE = "default"
#: The name of the profile GPUCLOUD_ENDPOINT and GPUCLOUD_API_KEY make, never stored.
ENVIRONMENT_PROFILE = "environment"


@dataclass(frozen=True)
class Profile:
    name: str
    endpoint: str
    api_key: str


class NotLoggedIn(Exception):
    pass


class UnsafeEndpoint(Exception):
    """An endpoint an API key must not be sent to."""


#: Where `http://` is accepted: the key never leaves the machine.
LOOPBACK_NAMES = {"localhost"}


def config_path() -> Path:
    if explicit := os.environ.get("GPUCLOUD_CONFIG"):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "gpucloud" / "config.json"


def state_dir() -> Path:
    """Where upload journals live: beside the config, so one setting moves both."""
    return config_path().parent / "state"


def _read() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(config_path().read_text())
    except FileNotFoundError:
        return {"current": DEFAULT_PROFILE, "profiles": {}}
    return data


def _write(data: dict[str, Any]) -> None:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = path.with_suffix(".tmp")
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as sink:
        json.dump(data, sink, indent=2)
    os.chmod(scratch, 0o600)  # an older scratch file keeps its mode through O_CREAT
    scratch.replace(path)


def save(profile: Profile, *, make_current: bool = True) -> None:
    data = _read()
    data["profiles"][profile.name] = {"endpoint": profile.endpoint, "apiKey": profile.api_key}
    if make_current or len(data["profiles"]) == 1:
        data["current"] = profile.name
    _write(data)


def remove(name: str) -> bool:
    data = _read()
    if data["profiles"].pop(name, None) is None:
        return False
    if data["current"] == name:
        data["current"] = next(iter(data["profiles"]), DEFAULT_PROFILE)
    _write(data)
    return True


def use(name: str) -> None:
    data = _read()
    if name not in data["profiles"]:
        raise NotLoggedIn(f"no profile {name!r}; `gpucloud login --profile {name}` makes it")
    data["current"] = name
    _write(data)


def profiles() -> tuple[str, dict[str, str]]:
    """The current profile's name, and every profile's endpoint."""
    data = _read()
    return data["current"], {name: p["endpoint"] for name, p in data["profiles"].items()}


def load_profile(name: str) -> Profile:
    """The profile as stored, whatever GPUCLOUD_ENDPOINT and GPUCLOUD_API_KEY say."""
    stored = _read()["profiles"].get(name)
    if stored is None:
        raise NotLoggedIn(f"no profile {name!r}")
    return Profile(name, stored["endpoint"], stored["apiKey"])


def load(name: str | None) -> Profile:
    """The endpoint and key every command uses: the environment's, the stored
    profile's, or the profile's key with the environment's endpoint where that is the
    endpoint the key was stored for."""
    env_endpoint, env_key = os.environ.get("GPUCLOUD_ENDPOINT"), os.environ.get("GPUCLOUD_API_KEY")
    if env_endpoint and env_key and name is None:
        return Profile(ENVIRONMENT_PROFILE, check_endpoint(env_endpoint), env_key)
    data = _read()
    chosen = name or data["current"]
    stored = data["profiles"].get(chosen)
    if stored is None:
        raise NotLoggedIn(
            f"not logged in (no profile {chosen!r}): run `gpucloud login`"
            + (f" --profile {chosen}" if chosen != DEFAULT_PROFILE else "")
        )
    endpoint = env_endpoint or stored["endpoint"]
    if not env_key and not same_endpoint(endpoint, stored["endpoint"]):
        raise UnsafeEndpoint(
            f"GPUCLOUD_ENDPOINT is {env_endpoint}, but profile {chosen!r} holds a key for "
            f"{stored['endpoint']} and sends it nowhere else: set GPUCLOUD_API_KEY too, or "
            f"`gpucloud login --endpoint {env_endpoint}`"
        )
    return Profile(chosen, check_endpoint(endpoint), env_key or stored["apiKey"])


def check_endpoint(endpoint: str) -> str:
    """The endpoint, if an API key may be sent there: https, or http to this machine."""
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
    except ValueError as error:
        raise UnsafeEndpoint(f"{endpoint!r} is not a URL: {error}") from error
    if parts.scheme not in {"http", "https"} or not host:
        raise UnsafeEndpoint(f"{endpoint!r} is not an https:// URL (https://gpu.example.com)")
    if parts.scheme == "http" and not is_loopback(host):
        raise UnsafeEndpoint(
            f"refusing {endpoint}: an API key would cross the network in clear; use https:// "
            "(http:// only to a loopback address: 127.0.0.0/8, ::1, localhost)"
        )
    return endpoint


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_endpoint(one: str, other: str) -> bool:
    """The same server and base path, however the URL is spelled (case, default port,
    trailing slash)."""
    return _origin(one) == _origin(other)


def _origin(endpoint: str) -> tuple[str, str, int | None, str]:
    try:
        parts = urlsplit(endpoint.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return ("", endpoint, None, "")
    return (parts.scheme, parts.hostname or "", port, parts.path.rstrip("/"))
