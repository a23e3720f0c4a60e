from __future__ import annotations

from gpucloud_libs.settings import ServiceSettings


class MeteringSettings(ServiceSettings):
    service_name: str = "metering"
    http_port: int = 8003
    #: How often budgets and spend caps are checked against month-to-date spend.
    budget_interval_s: float = 5.0
    #: How often closed GPU intervals go out as usage records, and the outbox is swept.
    usage_interval_s: float = 15.0
    #: A closed GPU interval goes out as a usage record once its closing transition has
    #: been recorded this long, so that a node health change published around the same
    #: moment can still credit it.
    usage_settle_s: float = 30.0
