"""The workload core: what instances, jobs and inference services share."""
