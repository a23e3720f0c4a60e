"""Warm stocks: units of a spec held ready on nodes, so a start skips the scheduler."""
