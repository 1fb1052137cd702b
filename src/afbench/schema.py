"""The output directory's schema version: one number for every file afbench writes into it.

A module of its own, with no imports, so that the leaf :mod:`afbench.runspec` (plan.json,
runspec.json, status.json) and the worker can stamp it without importing the store. What each
version holds, and how older files are upgraded on read: :mod:`afbench.store.versioning`.
"""

SCHEMA_VERSION = 6
