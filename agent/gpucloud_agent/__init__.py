"""The gpucloud node agent: reads GPUs through NVML (or simulates the kwok fleet's) and
publishes telemetry and inventory on Kafka for the monitoring service."""
