"""GPU instances: a tenant's own GPUs with ports, ssh and storage, started and stopped at will."""
