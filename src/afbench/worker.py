"""The worker process: ``python -m afbench.worker <run_dir>/runspec.json``.

It reads only its RunSpec, runs the engine (:func:`afbench.engines.registry.engine_for`) on
the backend the plan recorded (``spec.backend``), writes ``metrics.jsonl`` and the engine's
typed result (``result.json``, through :data:`afbench.store.result.RESULT_FILE`) into the run
directory and exits 0 (OK), 125 (SKIPPED: a switch the backend cannot honour) or 1 (FAILED,
with one ``afbench.worker: error:`` line the launcher puts in the report).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from afbench.config.secrets import unmask_env
from afbench.engines.registry import engine_for
from afbench.errors import ConfigError, RunFailed, RunSkipped
from afbench.runspec import ERROR_PREFIX, SKIP_PREFIX, SKIPPED_EXIT_CODE, RunSpec
from afbench.store.names import RESULT
from afbench.store.result import RESULT_FILE  # not the summary's models: they cost 0.08 s
from afbench.store.run import RUNSPEC_FILE


def with_secrets(spec: RunSpec) -> RunSpec:
    """``spec`` as read from runspec.json, which holds secrets masked, with each masked
    ``launcher.env`` / ``engine.env`` value taken from this process's environment, where the
    launcher put the real one (:func:`afbench.config.secrets.unmask_env`)."""
    engine = spec.config.engine
    if getattr(engine, "env", None):
        engine = engine.model_copy(update={"env": unmask_env(engine.env)})
    return spec.model_copy(
        update={
            "env": unmask_env(spec.env),
            "config": spec.config.model_copy(update={"engine": engine}),
        }
    )


#: set by the launcher (afbench.launch.local.PARENT_PID_ENV): afbench's pid
PARENT_PID_ENV = "AFBENCH_PARENT_PID"
WATCH_S = 0.5


def _descends_from(pid: int) -> bool:
    """Whether ``pid`` (afbench) is an ancestor of this process, read up the ``/proc/<p>/stat``
    parent chain: the worker's parent, or torchrun's above a rank (torch's elastic agent
    starts each rank in a session of its own, so the session leader says nothing). Once
    afbench is gone the chain is reparented to init (or a subreaper) and holds it no more."""
    p = os.getppid()
    for _ in range(64):  # deeper than any launcher nests
        if p == pid:
            return True
        if p <= 1:
            return False
        try:
            p = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return os.getppid() == pid
    return False


def watch_parent(parent: int, grace_s: float) -> None:
    """Stop this worker's process group (SIGTERM, SIGKILL after ``grace_s`` seconds) once
    afbench (``parent``) is gone, e.g. after ``kill -9``: a worker must not run on without the
    launcher's timeout, holding the devices (it holds their locks until it is gone). Polls
    every :data:`WATCH_S` seconds in a daemon thread."""

    def watch() -> None:
        while _descends_from(parent):
            time.sleep(WATCH_S)
        print("afbench.worker: afbench is gone; stopping this run's processes", flush=True)
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
            try:
                os.killpg(os.getpgrp(), sig)
            except ProcessLookupError:
                return
            time.sleep(wait_s)

    threading.Thread(target=watch, name="afbench-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m afbench.worker <run_dir>/runspec.json", file=sys.stderr)
        return 2
    spec = with_secrets(RUNSPEC_FILE.read(Path(argv[0])))
    parent = os.environ.get(PARENT_PID_ENV)
    if parent and parent.isdigit():
        watch_parent(int(parent), spec.kill_grace_s)
    rank = int(os.environ.get("RANK", "0"))
    if rank:
        # under torchrun: only rank 0 writes the log the verdict is parsed from
        log = os.open(
            Path(spec.run_dir) / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log, 1)
        os.dup2(log, 2)
    print(
        f"afbench.worker: run {spec.run_id} (variant {spec.variant}, phase {spec.phase}, "
        f"repeat {spec.repeat})",
        flush=True,
    )
    try:
        result = engine_for(spec.config).run(spec, Path(spec.run_dir))
    except RunSkipped as exc:
        print(SKIP_PREFIX + str(exc), flush=True)
        return SKIPPED_EXIT_CODE
    except Exception as exc:  # every failure becomes one line in the report
        if not isinstance(exc, (RunFailed, ConfigError)):
            traceback.print_exc()
        print(ERROR_PREFIX + f"{type(exc).__name__}: {exc}".splitlines()[0], flush=True)
        return 1
    if rank == 0:
        RESULT_FILE.write(Path(spec.run_dir) / RESULT, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
