"""Run the instances service: `python -m gpucloud_instances`."""

from gpucloud_libs.runtime import serve

from .app import app, settings

serve(app, settings)
