"""Secrets sealed at rest (gpucloud_libs.sealing.SecretBox): what is sealed opens with
its key alone, a sealed value says nothing of the secret, and an unusable key is
refused at the start-up check with the setting's name."""

from __future__ import annotations

import base64

import pytest

from gpucloud_libs.identity import WeakKey
from gpucloud_libs.sealing import SecretBox

KEY = SecretBox.generate_key()
BOX = SecretBox(KEY, setting="GPUCLOUD_TEST_SEALING_KEY")


@pytest.mark.parametrize("secret", ["whsec_0123456789", "", "ünïcödé ✓", "x" * 10_000])
def test_a_sealed_secret_opens_to_itself_with_its_key(secret: str) -> None:
    assert BOX.open(BOX.seal(secret)) == secret


def test_a_sealed_secret_does_not_show_the_secret() -> None:
    sealed = BOX.seal("whsec_0123456789")
    assert "whsec" not in sealed
    assert b"whsec" not in base64.urlsafe_b64decode(sealed)


def test_sealing_twice_gives_two_different_values() -> None:
    assert BOX.seal("same") != BOX.seal("same")


def test_a_value_sealed_with_another_key_is_refused_not_misread() -> None:
    other = SecretBox(SecretBox.generate_key(), setting="OTHER")
    assert other.open(BOX.seal("whsec_0123456789")) is None


@pytest.mark.parametrize("sealed", ["", "garbage", "gAAAAA"])
def test_a_value_that_was_never_sealed_opens_to_nothing(sealed: str) -> None:
    assert BOX.open(sealed) is None


def test_a_tampered_sealed_value_opens_to_nothing() -> None:
    raw = bytearray(base64.urlsafe_b64decode(BOX.seal("whsec_0123456789")))
    raw[-40] ^= 1  # a bit of the ciphertext
    assert BOX.open(base64.urlsafe_b64encode(bytes(raw)).decode()) is None


def test_a_box_made_from_the_same_key_text_opens_what_the_first_sealed() -> None:
    """A service restarted with the same key reads back what it stored."""
    sealed = BOX.seal("presign-key")
    assert SecretBox(KEY, setting="GPUCLOUD_TEST_SEALING_KEY").open(sealed) == "presign-key"


def test_a_generated_key_is_32_bytes_of_base64url() -> None:
    assert len(base64.urlsafe_b64decode(SecretBox.generate_key())) == 32
    assert SecretBox.generate_key() != SecretBox.generate_key()
    SecretBox(SecretBox.generate_key(), setting="S").check()


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("", "GPUCLOUD_SEAL is not set"),
        ("change-me", "GPUCLOUD_SEAL is not 32 bytes of base64url"),
        (base64.urlsafe_b64encode(b"k" * 16).decode(), "is not 32 bytes"),
    ],
)
def test_an_unusable_key_is_refused_at_the_check_naming_its_setting(key: str, says: str) -> None:
    box = SecretBox(key, setting="GPUCLOUD_SEAL")
    with pytest.raises(WeakKey, match=says):
        box.check()
    # And on use, not silently.
    with pytest.raises(WeakKey):
        box.seal("x")
