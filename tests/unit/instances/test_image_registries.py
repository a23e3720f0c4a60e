"""Which registry an image reference names, as the container runtime reads it; an
address or a local name is refused however it is spelled (review M10)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from gpucloud_instances.schemas import ImageRef, image_registry

IMAGE = TypeAdapter(ImageRef)


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("busybox", "docker.io"),
        ("library/ubuntu:24.04", "docker.io"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io"),
        ("localhost:5000/x", "localhost:5000"),
        # A capital letter makes the first part a host: repository names have none.
        ("Intranet-Registry/x:1", "intranet-registry"),
        ("LOCALHOST/x", "localhost"),
    ],
)
def test_the_registry_is_read_as_the_runtime_reads_it(image: str, registry: str) -> None:
    assert image_registry(image) == registry


@pytest.mark.parametrize(
    "image", ["Intranet-Registry/x:1", "LOCALHOST/x", "LocalHost:5000/x", "10.0.0.5:5000/x"]
)
def test_a_node_network_registry_is_refused_however_spelled(image: str) -> None:
    with pytest.raises(ValidationError, match="public DNS name"):
        IMAGE.validate_python(image)
