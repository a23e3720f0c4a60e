"""Run the monitoring service: `python -m gpucloud_monitoring`."""

from gpucloud_libs.runtime import serve

from .app import app, settings

serve(app, settings)
