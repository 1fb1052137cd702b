"""Device backends: device selection, synchronisation, memory statistics, and what each
optimization switch means on that device (docs/inference.md, "What each switch means per device",
and docs/reference.md §4).

Import the submodules: :mod:`afbench.backends.resolve` (which backend, without torch; and
``get_backend``, which loads it) is what the orchestrator and the worker call;
:mod:`afbench.backends.base` (``Backend``) and the device modules import torch.
"""
