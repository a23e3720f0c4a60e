"""Run the metering service: `python -m gpucloud_metering`."""

from gpucloud_libs.runtime import serve

from .app import app, settings

serve(app, settings)
