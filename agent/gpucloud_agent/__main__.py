"""Run the node agent: `python -m gpucloud_agent [--simulate | --once | --check]`."""

from .cli import main

main()
