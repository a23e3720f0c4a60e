"""Native local stack: provisions and supervises the real servers gpucloud runs on.

Stdlib only, so it runs before the project's virtual environment exists.
"""
