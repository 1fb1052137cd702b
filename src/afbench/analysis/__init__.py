"""Pure analysis of run outputs: training logs, verdicts, profiler tables, statistics.

Nothing here imports torch, launches anything or imports another afbench package (an
import-linter contract); every function takes text, paths or DataFrames and returns plain
values, DataFrames or dataclasses, raising the exception types of
:mod:`afbench.analysis.errors` when an input breaks the reference rules. Import the
submodules (``afbench.analysis.steplog``, ``.steptrace``, ``.kernels``, ``.stats``,
``.verdict``, ``.sanity``): a command-engine worker that parses step lines never pays for
pandas or scipy.
"""
