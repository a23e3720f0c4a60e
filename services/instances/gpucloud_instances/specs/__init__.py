"""Instance specs: the shapes (GPUs, CPU, memory, zones) tenants start workloads of."""
