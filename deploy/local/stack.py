#!/usr/bin/env python3
"""Entry point for the native local stack; see `python3 deploy/local/stack.py --help`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpucloud_stack.cli import main

if __name__ == "__main__":
    main()
