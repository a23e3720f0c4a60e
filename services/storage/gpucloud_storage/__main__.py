"""Run the storage service: `python -m gpucloud_storage`."""

from gpucloud_libs.runtime import serve

from .app import create_app
from .settings import StorageSettings

settings = StorageSettings()
serve(create_app(settings), settings)
