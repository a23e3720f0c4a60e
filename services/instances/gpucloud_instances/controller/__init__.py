"""The reconcile loop: makes Kubernetes match the store, and records what it observes.

Shared machinery, one job each: `lease` (one replica acts at a time), `cache`
(list+watch of pods and nodes), `workqueue` (each item reconciled by one worker
at a time), `nodes` (cordons from node health) and `resync` (the periodic pass).
Each feature's reconciler lives in its package and gets only what it uses:
`instances.reconciler`, `jobs.reconciler`, `inference.reconciler`,
`tenancy.reconciler` (namespaces), `stocks.reconciler` (warm pools) and
`queue.admissions` (the admission queue's pass). `leader` runs them while the
lease is held; `wiring.build_controller` wires them. This package imports nothing
itself, so that its machinery can be imported without every reconciler.
"""
