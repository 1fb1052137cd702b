"""``plan.json``, ``runspec.json`` and ``status.json``: the worker contract's files. Their
models live in :mod:`afbench.runspec` (a leaf every layer reads: the planner, the launcher, the
worker); their versions and upgrade chains live here, with the other files'."""

from __future__ import annotations

from typing import Any

from afbench.runspec import Plan, RunSpec, RunStatus
from afbench.store.names import PLAN, RUNSPEC, STATUS
from afbench.store.versioning import FileSchema, as_messages, renamed, same_shape


def plan_v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """plan.json, version 4 -> 5: a rerun's contention reasons, English sentences before,
    become messages shown as written (:func:`afbench.store.versioning.as_messages`)."""
    return as_messages(data, "reruns.*.reasons")


def status_v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """status.json, version 4 -> 5: the reason, an English sentence before (``""``: none),
    becomes a message shown as written, or None (:func:`afbench.store.versioning.as_messages`)."""
    return as_messages(data, "reason")


#: plan.json: versions 0 and 1 carried no schema_version; every key they hold is a key of
#: version 2 (keys added since have defaults: ``order``, ``auto``, ``reruns``, ...); 4 -> 5:
#: :func:`plan_v4_to_v5`; 5 -> 6: ``repeats`` is ``rounds`` (verdict.rounds). A step that
#: changes a RunSpec must upgrade the plan's ``runs`` and ``reruns[].replaced`` too.
PLAN_FILE = FileSchema(
    PLAN, Plan, steps=(same_shape,) * 4 + (plan_v4_to_v5, renamed("repeats", "rounds"))
)
#: runspec.json: one RunSpec, as in plan.json's ``runs``.
RUNSPEC_FILE = FileSchema(RUNSPEC, RunSpec, steps=(same_shape,) * 6)
#: status.json: version 0 (no schema_version) and 1 hold the same keys as version 2; 4 -> 5:
#: :func:`status_v4_to_v5`.
STATUS_FILE = FileSchema(STATUS, RunStatus, steps=(same_shape,) * 4 + (status_v4_to_v5, same_shape))
