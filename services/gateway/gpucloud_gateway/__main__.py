"""Run the gateway service: `python -m gpucloud_gateway`."""

from gpucloud_libs.runtime import serve

from .app import app, settings

serve(app, settings, ws_max_size=settings.websocket_max_message_bytes)
