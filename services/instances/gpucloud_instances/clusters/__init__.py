"""Clusters: the Kubernetes clusters the platform places workloads in."""
