"""Device backends: device selection, synchronisation, memory statistics, and what each
optimization switch means on that device (../shared/DESIGN.md, "Switch meaning per backend").

Import the submodules: :mod:`afbench.backends.resolve` (which backend, no torch) is what the
orchestrator needs; :mod:`afbench.backends.base` (``Backend``, ``get_backend``) imports torch
and is for the worker.
"""
