"""Launch: one isolated worker process per RunSpec."""

from typing import Any

__all__ = ["launch_run", "write_skipped"]


def __getattr__(name: str) -> Any:
    # the launcher imports yaml and preflight; planning needs only launch.devices (PEP 562)
    if name in __all__:
        from afbench.launch import local  # see the comment above

        return getattr(local, name)
    raise AttributeError(f"module 'afbench.launch' has no attribute {name!r}")
