"""Profiles as `gpucloud login` stores them: where the file lives, that it keeps its
keys to its owner, which profile is current, and that a key goes only to the endpoint
it was stored for, never in clear across a network (gpucloud_cli config.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucloud_cli import config
from gpucloud_cli.config import NotLoggedIn, Profile, UnsafeEndpoint

PROD = Profile("prod", "https://gpu.example.com", "gpc_prod_key")
LAB = Profile("lab", "http://127.0.0.1:8000", "gpc_lab_key")


@pytest.fixture(autouse=True)
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config of this test's own, and no endpoint or key from the environment."""
    path = tmp_path / "gpucloud" / "config.json"
    monkeypatch.setenv("GPUCLOUD_CONFIG", str(path))
    monkeypatch.delenv("GPUCLOUD_ENDPOINT", raising=False)
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    return path


# --- where the file is -----------------------------------------------------------------


def test_the_file_is_gpucloud_config_then_xdg_then_the_home_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_file: Path
) -> None:
    assert config.config_path() == config_file
    monkeypatch.delenv("GPUCLOUD_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config.config_path() == tmp_path / "xdg" / "gpucloud" / "config.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config.config_path() == tmp_path / "home" / ".config" / "gpucloud" / "config.json"


def test_upload_journals_live_beside_the_config(config_file: Path) -> None:
    assert config.state_dir() == config_file.parent / "state"


# --- storing profiles ------------------------------------------------------------------


def test_a_stored_profile_is_readable_by_its_owner_alone(config_file: Path) -> None:
    config.save(PROD)
    assert config_file.stat().st_mode & 0o777 == 0o600
    assert config_file.parent.stat().st_mode & 0o777 == 0o700
    assert json.loads(config_file.read_text()) == {
        "current": "prod",
        "profiles": {"prod": {"endpoint": "https://gpu.example.com", "apiKey": "gpc_prod_key"}},
    }
    assert not config_file.with_suffix(".tmp").exists()


def test_the_first_profile_is_current_even_when_not_asked_to_be() -> None:
    config.save(PROD, make_current=False)
    config.save(LAB, make_current=False)
    assert config.profiles() == (
        "prod", {"prod": "https://gpu.example.com", "lab": "http://127.0.0.1:8000"},
    )  # fmt: skip


def test_using_a_profile_makes_it_current_and_an_unknown_one_is_refused() -> None:
    config.save(PROD)
    config.save(LAB, make_current=False)
    config.use("lab")
    assert config.profiles()[0] == "lab"
    with pytest.raises(NotLoggedIn, match="gpucloud login --profile staging"):
        config.use("staging")


def test_removing_the_current_profile_makes_the_next_one_current() -> None:
    config.save(PROD)
    config.save(LAB, make_current=False)
    assert config.remove("prod") is True
    assert config.profiles() == ("lab", {"lab": "http://127.0.0.1:8000"})
    assert config.remove("prod") is False
    assert config.remove("lab") is True
    assert config.profiles() == ("default", {})


def test_with_no_file_there_is_no_profile() -> None:
    assert config.profiles() == ("default", {})
    with pytest.raises(
        NotLoggedIn, match=r"not logged in \(no profile 'default'\): run `gpucloud login`$"
    ):
        config.load(None)
    with pytest.raises(NotLoggedIn, match="--profile prod"):
        config.load("prod")


# --- which endpoint and key a command uses ---------------------------------------------


def test_a_command_uses_the_current_profile_or_the_one_named() -> None:
    config.save(PROD)
    config.save(LAB, make_current=False)
    assert config.load(None) == PROD
    assert config.load("lab") == LAB
    assert config.load_profile("lab") == LAB


def test_the_environments_endpoint_and_key_make_a_profile_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config.save(PROD)
    monkeypatch.setenv("GPUCLOUD_ENDPOINT", "https://ci.example.com")
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_ci_key")
    assert config.load(None) == Profile("environment", "https://ci.example.com", "gpc_ci_key")
    # A profile named explicitly still uses the environment's endpoint and key, by its name.
    assert config.load("prod") == Profile("prod", "https://ci.example.com", "gpc_ci_key")
    # But the profile as stored is what it is.
    assert config.load_profile("prod") == PROD


def test_a_stored_key_is_not_sent_to_another_endpoint_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config.save(PROD)
    monkeypatch.setenv("GPUCLOUD_ENDPOINT", "https://evil.example.net")
    with pytest.raises(UnsafeEndpoint, match="set GPUCLOUD_API_KEY too"):
        config.load(None)


@pytest.mark.parametrize(
    "spelling",
    ["https://GPU.example.com", "https://gpu.example.com/", "https://gpu.example.com:443"],
)
def test_the_same_endpoint_spelled_otherwise_may_use_the_stored_key(
    monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    config.save(PROD)
    monkeypatch.setenv("GPUCLOUD_ENDPOINT", spelling)
    assert config.load(None) == Profile("prod", spelling, "gpc_prod_key")


def test_endpoints_differ_by_scheme_port_or_base_path() -> None:
    base = "https://gpu.example.com"
    assert config.same_endpoint(base, "HTTPS://gpu.example.com/")
    assert config.same_endpoint("http://localhost", "http://localhost:80")
    assert not config.same_endpoint(base, "http://gpu.example.com")
    assert not config.same_endpoint(base, "https://gpu.example.com:8443")
    assert not config.same_endpoint(base, "https://gpu.example.com/other")


# --- no key in clear -------------------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    ["https://gpu.example.com", "http://127.0.0.1:8000", "http://127.8.9.10",
     "http://[::1]:8000", "http://localhost:8000"],
)  # fmt: skip
def test_https_anywhere_and_http_to_this_machine_are_safe(endpoint: str) -> None:
    assert config.check_endpoint(endpoint) == endpoint


def test_http_across_a_network_is_refused_naming_what_is_allowed() -> None:
    with pytest.raises(UnsafeEndpoint, match="would cross the network in clear"):
        config.check_endpoint("http://gpu.example.com")
    with pytest.raises(UnsafeEndpoint, match="cross the network"):
        config.check_endpoint("http://10.0.0.5:8000")


@pytest.mark.parametrize("endpoint", ["ftp://gpu.example.com", "gpu.example.com", "https://"])
def test_an_endpoint_that_is_no_web_url_is_refused(endpoint: str) -> None:
    with pytest.raises(UnsafeEndpoint, match="is not an https:// URL"):
        config.check_endpoint(endpoint)


def test_an_unparsable_url_is_refused_as_no_url() -> None:
    with pytest.raises(UnsafeEndpoint, match="is not a URL"):
        config.check_endpoint("https://[::1")


def test_loopback_means_localhost_or_a_loopback_address() -> None:
    assert config.is_loopback("localhost")
    assert config.is_loopback("127.0.0.1")
    assert config.is_loopback("::1")
    assert not config.is_loopback("localhost.example.com")
    assert not config.is_loopback("0.0.0.0")  # noqa: S104 (a value, not a bind)
    assert not config.is_loopback("192.168.1.1")
