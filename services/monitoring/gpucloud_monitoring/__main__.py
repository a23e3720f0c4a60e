"""Run the monitoring service: `python -m gpucloud_monitoring`."""

from gpucloud_libs.runtime import serve

from .app import create_app
from .settings import MonitoringSettings

settings = MonitoringSettings()
serve(create_app(settings), settings)
