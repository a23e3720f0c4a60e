"""Batch jobs: queued, admitted fairly, run to an end on one or many nodes."""
