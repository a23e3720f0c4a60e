"""Run the metering service: `python -m gpucloud_metering`."""

from gpucloud_libs.runtime import serve

from .app import create_app
from .settings import MeteringSettings

settings = MeteringSettings()
serve(create_app(settings), settings)
