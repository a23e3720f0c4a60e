"""Run the gateway service: `python -m gpucloud_gateway`."""

from gpucloud_libs.runtime import serve

from .app import create_app
from .settings import GatewaySettings

settings = GatewaySettings()
serve(create_app(settings), settings, ws_max_size=settings.websocket_max_message_bytes)
