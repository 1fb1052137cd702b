"""Launch: one isolated worker process per RunSpec."""

from afbench.launch.local import launch_run, write_skipped

__all__ = ["launch_run", "write_skipped"]
