"""`gpucloud join` reads the gateway and the secret from an invitation's link as sent."""

from __future__ import annotations

import click
import pytest

from gpucloud_cli.invitations import _parse_link


def test_the_endpoint_and_the_secret_come_from_the_link() -> None:
    assert _parse_link(" https://gpu.example.com:8443/join#gpi_abc-123 \n") == (
        "https://gpu.example.com:8443",
        "gpi_abc-123",
    )


@pytest.mark.parametrize("link", ["gpi_abc", "https://gpu.example.com/join", "/join#gpi_abc"])
def test_a_link_cut_short_is_refused_with_what_to_give(link: str) -> None:
    with pytest.raises(click.BadParameter, match="give the whole link"):
        _parse_link(link)
