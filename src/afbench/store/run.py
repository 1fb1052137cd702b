"""``plan.json``, ``runspec.json`` and ``status.json``: the worker contract's files. Their
models live in :mod:`afbench.runspec` (a leaf every layer reads: the planner, the launcher, the
worker); their versions and upgrade chains live here, with the other files'."""

from __future__ import annotations

from afbench.runspec import Plan, RunSpec, RunStatus
from afbench.store.names import PLAN, RUNSPEC, STATUS
from afbench.store.versioning import FileSchema, renamed, same_shape

#: plan.json: versions 0 and 1 carried no schema_version; every key they hold is a key of
#: version 2 (keys added since have defaults: ``order``, ``auto``, ``reruns``, ...). A step
#: that changes a RunSpec must upgrade the plan's ``runs`` and ``reruns[].replaced`` too.
#: 4 -> 5: ``repeats`` is ``rounds`` (verdict.rounds).
PLAN_FILE = FileSchema(
    PLAN, Plan, steps=(same_shape, same_shape, same_shape, same_shape, renamed("repeats", "rounds"))
)
#: runspec.json: one RunSpec, as in plan.json's ``runs``.
RUNSPEC_FILE = FileSchema(RUNSPEC, RunSpec, steps=(same_shape,) * 5)
#: status.json: version 0 (no schema_version) and 1 hold the same keys as version 2.
STATUS_FILE = FileSchema(STATUS, RunStatus, steps=(same_shape,) * 5)
