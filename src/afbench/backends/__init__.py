"""Device backends: device selection, synchronisation, memory statistics, and what each
optimization switch means on that device (../shared/DESIGN.md, "Switch meaning per backend")."""

from afbench.backends.base import Backend, detect_backend, get_backend

__all__ = ["Backend", "detect_backend", "get_backend"]
