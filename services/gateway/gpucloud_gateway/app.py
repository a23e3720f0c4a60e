"""Gateway: the public API, identity and the reverse proxy to instance URLs."""

from __future__ import annotations

from gpucloud_libs.runtime import ServiceRuntime

from .api import router
from .service import install_bootstrap_admin
from .settings import GatewaySettings
from .store import INDEXES, ApiKeyStore

settings = GatewaySettings()
runtime = ServiceRuntime(settings, indexes=INDEXES)
api_keys = ApiKeyStore(runtime.db)


async def _install_bootstrap_admin() -> None:
    if settings.bootstrap_admin_key is not None:
        await install_bootstrap_admin(api_keys, settings.bootstrap_admin_key.get_secret_value())


runtime.on_start(_install_bootstrap_admin)

app = runtime.create_app(
    title="gpucloud",
    description="GPU cloud control plane: the public API.",
    routers=[router],
)
app.state.api_keys = api_keys
