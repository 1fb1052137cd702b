"""The local launcher: run one RunSpec as its own process, with its own caches, log and timeout.

Each worker gets a fresh process session, so a timeout, Ctrl-C or SIGTERM stops the worker's
whole process group (inductor's compile workers included) and leaves no orphans.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

import yaml

from afbench.analysis.errors import LogNotRead
from afbench.analysis.reading import ReadBudget, stop_reading
from afbench.analysis.steplog import iter_log, log_lines
from afbench.config.secrets import masked, secret_env
from afbench.engines.registry import engine_for
from afbench.engines.rendezvous import node_launch, torchrun_args
from afbench.errors import AfbenchError
from afbench.io import write_text_atomic
from afbench.launch.devices import (
    device_locks,
    held_devices,
    run_devices,
    visible_devices_env,
)
from afbench.launch.quiet import wait_for_quiet
from afbench.messages import Message, as_written, say
from afbench.preflight import find_cann_root
from afbench.runspec import (
    ERROR_PREFIX,
    INTERRUPTED_REASON,
    SKIP_PREFIX,
    SKIPPED_EXIT_CODE,
    RunSpec,
    RunStatus,
)
from afbench.store.layout import CONFIG_YAML, RESULT, RUNSPEC, STATUS, STDOUT_LOG, window_problem
from afbench.store.run import RUNSPEC_FILE, STATUS_FILE

# the output directory's folder of the caches its runs share (compiler_cache_dirs)
CACHE = "cache"
RUNS = "runs"
# the compiler caches whose content makes a run's compile warm (kernel_cache_state)
KERNEL_CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def prepare_run_dir(spec: RunSpec) -> Path:
    """Create the run directory exclusively (never reused) and write the RunSpec into it."""
    run_dir = Path(spec.run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(mode=0o700)  # FileExistsError if it exists: a run dir is never reused
    RUNSPEC_FILE.write(run_dir / RUNSPEC, spec)
    write_text_atomic(
        run_dir / CONFIG_YAML,
        yaml.safe_dump(masked(spec.config.model_dump(mode="json")), sort_keys=False),
    )
    return run_dir


def compiler_cache_dirs(backend: str, run_dir: Path) -> dict[str, Path]:
    """Where a worker's compilers keep their caches: ``{variable: folder}``.

    As the reference script does (docs/reference.md §1), TRITON_CACHE_DIR and
    TORCH_EXTENSIONS_DIR are shared by the runs of one experiment (``<out>/cache/``, the kernel
    binaries) and TORCHINDUCTOR_CACHE_DIR is each run's own (``<run_dir>/cache/inductor``). On
    ``cpu`` inductor keeps its C++ kernel binaries inside TORCHINDUCTOR_CACHE_DIR (no other
    variable moves them) and its precompiled header inside ``tempfile.gettempdir()``, so there
    both are shared too (``<out>/cache/inductor``, ``<out>/cache/tmp``): the CPU analogue of the
    reference's shared TRITON_CACHE_DIR. The FX graph and AOT autograd caches stay off
    (:func:`worker_env`), so dynamo, AOT autograd and inductor's lowering and code generation
    run in every compiled run; only the C++ compiler is spared a kernel an earlier run of the
    experiment built. Elsewhere TMPDIR is each run's own (``<run_dir>/tmp``).

    ``run_dir`` is ``<out>/runs/<run_id>``; a run folder outside that layout shares with its
    parent folder's ``cache/``. Inductor passes these paths unquoted to the C++ compiler: a
    path with whitespace is replaced by one under ``tempfile.gettempdir()`` (or /tmp) named by
    its digest.
    """

    def no_space(path: Path) -> Path:
        if not any(c.isspace() for c in str(path)):
            return path
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
        alt = Path(tempfile.gettempdir()) / f"afbench-{digest}"
        return alt if not any(c.isspace() for c in str(alt)) else Path("/tmp") / alt.name

    run_dir = Path(run_dir)
    out = run_dir.parent.parent if run_dir.parent.name == RUNS else run_dir.parent
    own, shared = no_space(run_dir) / "cache", no_space(out / CACHE)
    cpu = backend == "cpu"
    return {
        "TORCHINDUCTOR_CACHE_DIR": (shared if cpu else own) / "inductor",
        "TRITON_CACHE_DIR": shared / "triton",
        "TORCH_EXTENSIONS_DIR": shared / "torch_extensions",
        "TMPDIR": shared / "tmp" if cpu else no_space(run_dir) / "tmp",
    }


def kernel_cache_state(env: dict[str, str]) -> str:
    """``"warm"`` when a compiler cache of ``env`` (:data:`KERNEL_CACHE_VARS`) already holds a
    file (a kernel, its source or lock, a precompiled header: written only by compiled runs),
    else ``"cold"``. The launcher records it in status.json before the worker starts, and the
    report says when a time to first step was measured warm."""
    for name in KERNEL_CACHE_VARS:
        folder = env.get(name)
        if folder and any(p.is_file() for p in Path(folder).rglob("*")):
            return "warm"
    return "cold"


def worker_env(spec: RunSpec, run_dir: Path) -> dict[str, str]:
    """Environment of a worker: this process's, plus the compiler caches and TMPDIR of
    :func:`compiler_cache_dirs`, the CANN environment on npu, and the device visibility of
    the run's assigned devices.

    Inductor writes precompiled headers into ``tempfile.gettempdir()`` even with
    TORCHINDUCTOR_CACHE_DIR set, so TMPDIR is afbench's too (docs/reference.md §8). FX graph
    and autograd caches are off so every compiled run pays (and reports) its lowering; a run
    that found another run's kernels in a shared cache is marked ``kernel_cache: warm``.

    npu: ``<cann_root>/set_env.sh`` sourced in a clean shell
    (:func:`afbench.backends.npu.npu_worker_env`; root from ``backend.cann_root``,
    ``$ASCEND_TOOLKIT_HOME`` or ``$ASCEND_HOME_PATH``; none set: the environment afbench was
    started in is kept as it is), LD_PRELOAD / PYTHONHOME / CONDA_PREFIX removed,
    PYTORCH_NPU_ALLOC_CONF=expandable_segments:True (docs/reference.md §1). cuda/npu: the visibility
    variable of :func:`afbench.launch.devices.visible_devices_env`, set after ``launcher.env``
    so that the devices a run is timed on are the devices it holds the locks of.

    Raises:
        ConfigError: an assigned id is beyond afbench's own visibility mask.
        PreflightError: sourcing set_env.sh fails.
    """
    env = dict(os.environ)
    backend, devices = run_devices(spec)
    for name, path in compiler_cache_dirs(backend, run_dir).items():
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    env.update(
        TORCHINDUCTOR_FX_GRAPH_CACHE="0",
        TORCHINDUCTOR_AUTOGRAD_CACHE="0",
        TORCHINDUCTOR_SIZE_ASSERTS="0",
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    if backend == "npu":
        # npu only: backends.npu imports torch (1.5 s), which cpu and cuda runs never pay here
        from afbench.backends.npu import npu_worker_env

        root, _ = find_cann_root(spec.config.backend.cann_root)
        env = npu_worker_env(env, root)
    env.update(spec.env)
    # runspec.json holds engine.env's secrets masked: the worker takes them from here
    env.update(secret_env(getattr(spec.config.engine, "env", {})))
    env.update(visible_devices_env(backend, devices))
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


def worker_argv(spec: RunSpec, python: str, run_dir: Path) -> list[str]:
    """``python -m afbench.worker <runspec>``; for an engine whose worker is one process per
    rank (``Engine.torchrun``: the builtin one) and world_size > 1 the same under torchrun
    (``python -m torch.distributed.run``, one process per rank: ``--standalone`` on one node;
    with ``parallel.nnodes`` > 1 one agent per node by ``srun``, all joining one rendezvous:
    :mod:`afbench.engines.rendezvous`)."""
    worker = ["-m", "afbench.worker", str(run_dir / RUNSPEC)]
    parallel = spec.config.parallel
    if parallel.world_size > 1 and engine_for(spec.config).torchrun:
        return [
            *node_launch(parallel),
            python,
            "-m",
            "torch.distributed.run",
            *torchrun_args(parallel, spec.run_id),
            *worker,
        ]
    return [python, *worker]


#: the worker's watchdog stops its process group when this process (afbench) is gone
PARENT_PID_ENV = "AFBENCH_PARENT_PID"


@contextmanager
def hold_interrupts() -> Iterator[None]:
    """While afbench stops after a Ctrl-C or SIGTERM: a further Ctrl-C or SIGTERM is said
    (one line) and stops every log read from then on
    (:func:`afbench.analysis.reading.stop_reading`: a run's log not read yet is left unread,
    its row saying so), so the stop still writes the run's status, the later runs' SKIPPED
    records and the report, without reading a large log first. Handlers are restored
    afterwards (the reads stay stopped: :func:`afbench.analysis.reading.resume_reading`); a
    no-op outside the main thread (signals are delivered there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def said(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        stop_reading(f"afbench was stopping and got a second {name}")
        logging.getLogger(__name__).warning(
            "afbench: already stopping (%s): logs not read yet are left unread; "
            "writing the run's status and the report",
            name,
        )

    previous = {sig: signal.signal(sig, said) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the worker's process group, then SIGKILL what is left after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            # the leader is gone; make sure no child of the group survives it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _log_lines(log: Path) -> Iterator[str]:
    """The log's lines as a terminal shows them (analysis.steplog.log_lines: a progress bar
    sharing a line with the worker's own line is cut off, not the line dropped), read
    streaming with the line cap of :func:`afbench.analysis.steplog.iter_log`."""
    return (line for _, line in log_lines(iter_log(log)))


def _last_line(log: Path, prefix: str) -> str | None:
    found = None
    try:
        for line in _log_lines(log):
            if line.startswith(prefix):
                found = line[len(prefix) :].strip()
    except FileNotFoundError:
        return None
    return found


def _tail(log: Path, n: int = 1) -> str:
    try:
        lines = deque(_log_lines(log), maxlen=n)
    except FileNotFoundError:
        return ""
    return " | ".join(lines)[:300]


def write_skipped(spec: RunSpec, reason: Message) -> RunStatus:
    """Record a run that was not started: empty log, exit status 125, the reason."""
    run_dir = prepare_run_dir(spec)
    (run_dir / STDOUT_LOG).touch()
    status = RunStatus(
        run_id=spec.run_id,
        status="SKIPPED",
        exit_code=SKIPPED_EXIT_CODE,
        reason=reason,
        config_hash=spec.config_hash,
    )
    STATUS_FILE.write(run_dir / STATUS, status)
    return status


def skip_unrun(runs: list[RunSpec], reason: Message) -> int:
    """Record each of ``runs`` that has no status.json as SKIPPED with ``reason`` (a run whose
    folder holds its runspec gets only its status), as far as the disk allows: the first
    write that fails ends it. Returns how many were recorded."""
    done = 0
    for spec in runs:
        run_dir = Path(spec.run_dir)
        try:
            if (run_dir / STATUS).is_file() or (
                run_dir.exists() and not (run_dir / RUNSPEC).is_file()
            ):
                continue  # recorded, or a folder not afbench's: left as it is
            if run_dir.exists():
                STATUS_FILE.write(
                    run_dir / STATUS,
                    RunStatus(
                        run_id=spec.run_id,
                        status="SKIPPED",
                        exit_code=SKIPPED_EXIT_CODE,
                        reason=reason,
                        config_hash=spec.config_hash,
                    ),
                )
            else:
                write_skipped(spec, reason)
        except OSError:
            break
        done += 1
    return done


def launch_run(spec: RunSpec, python: str = sys.executable, quiet_s: float = 0.0) -> RunStatus:
    """Run ``spec`` in a fresh process and record its status.

    The worker is ``python -m afbench.worker <run_dir>/runspec.json``; stdout and stderr go to
    ``<run_dir>/stdout.log``. Status, decided here once: OK (exit 0, result.json written and
    the measured window of the log passes the strict parse), SKIPPED (exit 125: the backend
    cannot honour a switch), FAILED (non-zero exit, signal, timeout, no result, or ``invalid
    step log: ...``: :func:`afbench.store.layout.window_problem`).
    KeyboardInterrupt stops the worker's process group, records SKIPPED with the reason
    :data:`INTERRUPTED_REASON` (the run did not fail: it was stopped) and is re-raised.

    The run's devices (its cuda/npu ids, or the one cpu "device") are locked from before the
    worker starts until it has ended; a run whose device another afbench run holds waits for
    it (:func:`afbench.launch.devices.device_locks`). ``wall_s`` and the timeout count from
    when the locks are held; the wait is recorded as ``lock_wait_s``. A lock or device
    problem records FAILED with its reason. With the locks held, a measured run waits up to
    ``quiet_s`` seconds for a quiet machine (:func:`afbench.launch.quiet.wait_for_quiet`).
    """
    run_dir = prepare_run_dir(spec)
    log_path = run_dir / STDOUT_LOG
    # The run's devices stay locked from before the worker starts until its process group is
    # gone: no other afbench run is timed on them meanwhile (afbench.launch.devices).
    hold = ExitStack()
    kernel_cache = None
    try:
        env = worker_env(spec, run_dir)
        kernel_cache = kernel_cache_state(env)
        backend, _ = run_devices(spec)
        held = held_devices(backend, env, spec.config.parallel.per_node)
        waited = time.perf_counter()
        lock_fds: list[int] = []
        hold.enter_context(
            device_locks(backend, held, label=f"{spec.run_id} ({run_dir})", fds=lock_fds)
        )
        lock_wait_s = round(time.perf_counter() - waited, 3)
        wait_for_quiet(quiet_s, spec.run_id)
    except AfbenchError as exc:
        return _finish(
            spec, run_dir, "FAILED", None, as_written(str(exc)), _now(), time.perf_counter()
        )
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            _finish(
                spec,
                run_dir,
                "SKIPPED",
                None,
                say("skip_interrupted_before_start"),
                _now(),
                time.perf_counter(),
            )
        else:
            _finish(
                spec,
                run_dir,
                "FAILED",
                None,
                as_written(f"{type(exc).__name__}: {exc}"),
                _now(),
                time.perf_counter(),
            )
        raise
    started, t0 = _now(), time.perf_counter()
    reason: Message | None = None
    code = None
    with hold, open(log_path, "wb") as log:
        proc = subprocess.Popen(
            worker_argv(spec, python, run_dir),
            cwd=run_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # the worker holds the device locks too: a worker outliving afbench (kill -9)
            # keeps them until its watchdog (afbench.worker) has stopped its group
            pass_fds=lock_fds,
        )
        try:
            code = proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc, spec.kill_grace_s)
            code = proc.returncode
            reason = say("run_timed_out", seconds=spec.timeout_s)
        except BaseException:
            with hold_interrupts():  # a second Ctrl-C still gets the status written
                _stop_group(proc, spec.kill_grace_s)
                _finish(
                    spec,
                    run_dir,
                    "SKIPPED",
                    proc.returncode,
                    say(INTERRUPTED_REASON),
                    started,
                    t0,
                    kernel_cache=kernel_cache,
                )
            raise
        else:
            _stop_group(proc, 0)  # reap anything the worker left behind in its group
    try:  # reading the log: a Ctrl-C here still records the run (it was stopped)
        with ReadBudget(spec.collect_timeout_s):  # afbench's own time, after timeout_s
            state, reason = _outcome(spec, run_dir, code, reason)
    except LogNotRead as exc:  # over launcher.collect_timeout_s: the run gives no verdict
        text = str(exc) if code == 0 else f"exit status {code}; {exc}"
        state, reason = "FAILED", as_written(text)
    except KeyboardInterrupt:
        with hold_interrupts():
            _finish(
                spec,
                run_dir,
                "SKIPPED",
                code,
                say(INTERRUPTED_REASON),
                started,
                t0,
                lock_wait_s,
                kernel_cache,
            )
        raise
    return _finish(spec, run_dir, state, code, reason, started, t0, lock_wait_s, kernel_cache)


def _outcome(
    spec: RunSpec, run_dir: Path, code: int | None, reason: Message | None
) -> tuple[str, Message | None]:
    """(status, reason) of a worker that ended with exit status ``code`` (``reason``: the
    launcher's own, e.g. its timeout), from its files (:func:`launch_run`). What the worker
    or the step log says is kept as written (``as_written``)."""
    log_path = run_dir / STDOUT_LOG
    if reason:
        return "FAILED", reason
    if code == 0 and (run_dir / RESULT).exists():
        problem = window_problem(spec, run_dir)
        return ("FAILED", as_written(problem)) if problem else ("OK", None)
    if code == 0:
        return "FAILED", say("run_no_result")
    if code == SKIPPED_EXIT_CODE:
        line = _last_line(log_path, SKIP_PREFIX)
        return "SKIPPED", as_written(line) if line else say("run_skipped_by_worker")
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        return "FAILED", say("run_killed_oom" if code == -9 else "run_killed", signal=name)
    line = _last_line(log_path, ERROR_PREFIX)
    return "FAILED", as_written(line or f"exit status {code}: {_tail(log_path)}")


def _finish(
    spec: RunSpec,
    run_dir: Path,
    state: str,
    code: int | None,
    reason: Message | None,
    started: str,
    t0: float,
    lock_wait_s: float | None = None,
    kernel_cache: str | None = None,
) -> RunStatus:
    status = RunStatus(
        run_id=spec.run_id,
        status=state,
        exit_code=code,
        reason=reason,
        wall_s=round(time.perf_counter() - t0, 3),
        started_at=started,
        finished_at=_now(),
        config_hash=spec.config_hash,
        lock_wait_s=lock_wait_s,
        kernel_cache=kernel_cache,
    )
    STATUS_FILE.write(run_dir / STATUS, status)
    return status
