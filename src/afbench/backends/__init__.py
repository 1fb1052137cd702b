"""Device backends: device selection, synchronisation, memory statistics, and what each
optimization switch means on that device (../shared/DESIGN.md, "Switch meaning per backend").

Import the submodules: :mod:`afbench.backends.resolve` (which backend, without torch; and
``get_backend``, which loads it) is what the orchestrator and the worker call;
:mod:`afbench.backends.base` (``Backend``) and the device modules import torch.
"""
