"""Batch jobs on a Ray cluster: `sglite extract --ray` and `run_batch(..., backend=sgl.RayRuntime(...))`.

Pieces: cluster.py (finding Ray and the cluster, before anything starts), replica.py (what one actor holds:
one Engine, and the shard methods), pool.py (the actors, their resources and restarts), dispatcher.py (the
driver's loop: shards out, results streamed back, lost work retried), jobs.py (extraction and run_batch on a
dispatcher), results.py (ProgramResult, a program's state as plain data). The backend facade is
sglite/backend/ray_runtime.py. Importing this package imports neither Ray nor torch."""
