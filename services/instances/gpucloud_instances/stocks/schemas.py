"""Request and response models of the stocks API."""

from __future__ import annotations

from pydantic import (
    Field,
)

from gpucloud_libs.http import ApiModel

from ..schemas import DnsLabel, ImageRef


class StockChange(ApiModel):
    """Seed 004's stock operation: add (POST) or remove (DELETE) `number` warm units."""

    number: int = Field(ge=1, le=1000)
    operation_id: str = Field(alias="operationID", min_length=1, max_length=128)
    spec_name: DnsLabel
    #: The cluster the units are kept in (`GET /v1/clusters`); the home cluster when
    #: left out. A stock serves the starts placed in its cluster.
    cluster: DnsLabel | None = None
    #: Images the spec's placeholders pull onto their nodes, so that a start from the
    #: stock finds its image there (POST only). The latest list given applies to the
    #: placeholders made from then on; `[]` clears it, leaving it out keeps it.
    images: list[ImageRef] | None = Field(default=None, max_length=4)


class StockStatus(ApiModel):
    cluster: str
    spec_name: str
    target: int
    available: int
    placing: int
    images: list[str] = Field(default_factory=list)
