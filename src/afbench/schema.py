"""The version of afbench's result files (summary.json, result.json, sweep_summary.json).

A module of its own, with no imports, so that the worker process can stamp its result.json
without importing :mod:`afbench.results` (its pydantic models cost about 0.08 s to build in
every worker). :mod:`afbench.results` re-exports it and documents what each version holds.
"""

SCHEMA_VERSION = 1
