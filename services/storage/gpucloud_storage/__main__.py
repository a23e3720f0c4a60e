"""Run the storage service: `python -m gpucloud_storage`."""

from gpucloud_libs.runtime import serve

from .app import app, settings

serve(app, settings)
