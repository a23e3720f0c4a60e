"""Run the node agent: `python -m gpucloud_agent [--simulate | --once]`."""

from .agent import main

main()
