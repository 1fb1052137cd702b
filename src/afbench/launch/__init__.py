"""Launch: one isolated worker process per RunSpec."""

from afbench.launch.local import RunStatus, launch_run, write_skipped

__all__ = ["RunStatus", "launch_run", "write_skipped"]
