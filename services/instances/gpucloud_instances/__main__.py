"""Run the instances service: `python -m gpucloud_instances`."""

from gpucloud_libs.runtime import serve

from .app import create_app
from .settings import InstancesSettings

settings = InstancesSettings()
serve(create_app(settings), settings)
