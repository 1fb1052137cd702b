"""Pure analysis of run outputs: training logs, verdicts, profiler tables, statistics.

Nothing here imports torch, launches anything or imports another afbench package (an
import-linter contract); every function takes text, paths or DataFrames and returns plain
values, DataFrames or dataclasses, raising the exception types of
:mod:`afbench.analysis.errors` when an input breaks the reference rules. Import the
submodules (``afbench.analysis.steplog``, ``.steptrace``, ``.kernels``, ``.stats``,
``.verdict``, ``.sanity``): a command-engine worker that parses step lines never pays for
pandas or scipy.
"""

from typing import Any


def said(key: str, /, **args: Any) -> dict[str, Any]:
    """A report sentence as plain data, ``{"key": key, "args": args}``: ``key`` a label of
    ``afbench/report/templates/labels.yaml``, ``args`` the values its fields take. What
    analysis records instead of English (it imports no afbench package): the store's message
    fields (``afbench.messages.Message``) read it, the report words it in its language."""
    return {"key": key, "args": args}
