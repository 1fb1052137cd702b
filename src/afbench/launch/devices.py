"""Devices of a run: which ids it gets, how the worker is made to see only them, and the
per-device locks that keep two timing runs off one device.

Hydra assigns no devices to jobs: under a parallel launcher (submitit, joblib) every job would
open device 0 and the step times of both would be worthless (docs/reference.md §5). afbench therefore

1. *assigns* ids per run (:func:`assign_devices`): ``parallel.devices`` when given, else the
   job's block of ``launcher.device_pool`` in a sweep, else nothing (devices 0..world_size-1);
2. *restricts* the worker to them with the backend's visibility variable
   (:func:`visible_devices_env`: ``CUDA_VISIBLE_DEVICES`` / ``ASCEND_RT_VISIBLE_DEVICES``), so
   inside the worker they are devices ``0..world_size-1``;
3. *locks* them while the worker runs (:func:`device_locks`): an exclusive ``fcntl.flock`` on
   ``<lock dir>/afbench-<backend>-<id>.lock`` per device, so a second run that wants a busy
   device waits, whatever launched it (another sweep job, another afbench invocation).

Ids in ``parallel.devices`` and ``launcher.device_pool`` are the ids afbench itself sees, as
preflight checks them: when afbench already runs under a visibility mask (a SLURM allocation,
``CUDA_VISIBLE_DEVICES=4,5`` in the shell), id ``i`` is the ``i``-th entry of that mask, and
the worker's mask and the lock name use that entry (the physical device).

On cpu there is one "device": every run takes ``afbench-cpu.lock``. Two timing runs sharing the
cores would each measure the other's load, so concurrent sweep jobs on one machine
(``hydra/launcher=submitit_local``) serialise their runs; only the runs are serialised, their
preflight, planning and reports overlap.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from afbench.backends.resolve import BACKENDS, VISIBLE_DEVICES_ENV, resolve_backend
from afbench.config.models import ParallelConfig
from afbench.errors import AfbenchError, ConfigError

log = logging.getLogger(__name__)

#: Folder of the lock files (default: the system temp dir, ``tempfile.gettempdir()``).
LOCK_DIR_ENV = "AFBENCH_LOCK_DIR"
CPU_LOCK_NAME = "afbench-cpu.lock"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class DeviceLockError(AfbenchError):
    """A device lock file cannot be opened (permissions, missing folder)."""

    exit_code = 1


def assign_devices(
    parallel: ParallelConfig, backend_name: str, job_num: int | None, pool: Sequence[int] | None
) -> list[int] | None:
    """Device ids of one run, or None for "the first ``world_size`` devices, no mask".

    Rules, first match wins:

    - cpu: None (no device ids).
    - ``parallel.devices`` given: exactly those (the user's explicit choice).
    - ``pool`` (``launcher.device_pool``) given: the pool is cut into
      ``len(pool) // world_size`` aligned blocks of ``world_size`` ids and sweep job
      ``job_num`` takes block ``job_num mod blocks`` (a plain run, ``job_num`` None, takes the
      first). So with ``world_size`` 1 and pool ``[0,1,2,3]`` jobs 0..3 get devices 0..3 and
      job 4 shares device 0 with job 0 (its lock makes it wait). When ``len(pool)`` is a
      multiple of ``world_size`` this is the slice
      ``pool[job_num*world_size % len(pool) : ... + world_size]``; otherwise the last
      ``len(pool) % world_size`` ids are left unused rather than split a job across the wrap.
    - else None: devices 0..world_size-1 of every job (their locks serialise the jobs).

    Args:
        parallel: the run's ``parallel`` section (``world_size``, ``devices``).
        backend_name: the *resolved* backend, ``cpu``, ``cuda`` or ``npu`` (not ``auto``).
        job_num: Hydra's ``hydra.job.num`` in a sweep (0-based), None outside one.
        pool: ``launcher.device_pool``: distinct device ids afbench may use, or None.

    Raises:
        ValueError: ``backend_name`` is not cpu/cuda/npu.
        ConfigError: the pool has duplicates, or fewer ids than ``world_size``.
    """
    if backend_name not in BACKENDS:
        raise ValueError(f"backend {backend_name!r} must be resolved to one of {BACKENDS}")
    if backend_name == "cpu":
        return None
    if parallel.devices is not None:
        return list(parallel.devices)
    if pool is None:
        return None
    pool = list(pool)
    world = parallel.per_node  # one node's share: every node uses the same ids
    if len(set(pool)) != len(pool):
        raise ConfigError(f"launcher.device_pool: ids must be distinct, got {pool}")
    if world > len(pool):
        raise ConfigError(
            f"launcher.device_pool: {len(pool)} device(s) {pool} cannot hold one run of "
            f"parallel.world_size {world}; list at least {world} ids or lower world_size"
        )
    blocks = len(pool) // world
    start = ((job_num or 0) % blocks) * world
    return pool[start : start + world]


def _mask(backend: str, environ: Mapping[str, str]) -> list[str] | None:
    """Entries of the backend's visibility variable in ``environ`` (None when unset)."""
    var = VISIBLE_DEVICES_ENV.get(backend)
    if var is None or var not in environ:
        return None
    return [t.strip() for t in environ[var].split(",") if t.strip()]


def physical_devices(
    backend: str, ids: Sequence[int], environ: Mapping[str, str] | None = None
) -> list[str]:
    """The visibility entries (physical ids, or UUIDs) of afbench's device ``ids``.

    Without a mask in ``environ`` (default ``os.environ``) id ``i`` is ``"i"``; under a mask
    it is the mask's ``i``-th entry.

    Raises:
        ConfigError: an id is beyond what the mask makes visible.
    """
    environ = os.environ if environ is None else environ
    mask = _mask(backend, environ)
    if mask is None:
        return [str(i) for i in ids]
    beyond = [i for i in ids if i >= len(mask)]
    if beyond:
        var = VISIBLE_DEVICES_ENV[backend]
        raise ConfigError(
            f"device id(s) {beyond}: afbench runs with {var}={environ[var]!r}, which makes "
            f"{len(mask)} device(s) visible (ids 0..{len(mask) - 1}); fix parallel.devices / "
            f"launcher.device_pool, or unset {var}"
        )
    return [mask[i] for i in ids]


def visible_devices_env(
    backend: str, ids: Sequence[int] | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Variables that restrict a worker to ``ids``: ``{CUDA_VISIBLE_DEVICES: "2,3"}`` (cuda),
    ``{ASCEND_RT_VISIBLE_DEVICES: ...}`` (npu); ``{}`` on cpu or when ``ids`` is None (the
    worker then inherits afbench's own visibility). ``environ`` (default ``os.environ``) is
    afbench's environment, whose mask the ids index (:func:`physical_devices`)."""
    if backend == "cpu" or ids is None:
        return {}
    if backend not in VISIBLE_DEVICES_ENV:
        raise ValueError(f"backend {backend!r} must be resolved to one of {BACKENDS}")
    return {VISIBLE_DEVICES_ENV[backend]: ",".join(physical_devices(backend, ids, environ))}


def held_devices(backend: str, worker_environ: Mapping[str, str], world_size: int) -> list[str]:
    """What a worker with this environment uses, as lock names: on cpu ``[]`` (the cpu lock),
    else the first ``world_size`` entries of its visibility variable, or ``0..world_size-1``
    when it has none."""
    if backend == "cpu":
        return []
    mask = _mask(backend, worker_environ)
    if mask is None:
        return [str(i) for i in range(world_size)]
    return mask[:world_size]


def run_devices(spec: Any) -> tuple[str, list[int] | None]:
    """(resolved backend, assigned ids or None) of a RunSpec.

    Reads ``spec.backend`` / ``spec.devices`` when the plan recorded them (the assignment of
    :func:`assign_devices`, made at plan time with the sweep's job number), else resolves
    ``config.backend.name`` (:func:`afbench.backends.resolve.resolve_backend`) and takes
    ``config.parallel.devices``.
    """
    cfg = spec.config
    backend = getattr(spec, "backend", None) or resolve_backend(cfg.backend.name)
    ids = getattr(spec, "devices", None)
    if ids is None and backend != "cpu":
        ids = cfg.parallel.devices
    return backend, (list(ids) if ids is not None and backend != "cpu" else None)


def lock_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$AFBENCH_LOCK_DIR``, else ``tempfile.gettempdir()``."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(LOCK_DIR_ENV) or tempfile.gettempdir())


def lock_paths(backend: str, devices: Sequence[int | str], folder: Path) -> list[Path]:
    """Lock files of a run, sorted (every process takes them in the same order, so two runs
    wanting overlapping device sets cannot deadlock). cpu: ``afbench-cpu.lock`` only."""
    if backend == "cpu":
        return [folder / CPU_LOCK_NAME]
    names = {f"afbench-{backend}-{_UNSAFE.sub('_', str(d))}.lock" for d in devices}
    return [folder / n for n in sorted(names)]


def _open_lock(path: Path) -> int:
    # Open an existing file without O_CREAT first: with fs.protected_regular a sticky,
    # world-writable /tmp refuses O_CREAT on another user's file even when its mode allows.
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        os.fchmod(fd, 0o666)  # the umask (077 in the reference) would shut other users out
    except OSError:
        pass  # someone else's file (created between our two opens): its mode is theirs
    return fd


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


def _note_holder(fd: int, label: str) -> None:
    text = (
        f"pid {os.getpid()} on {socket.gethostname()} since "
        f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}"
        + (f": {label}" if label else "")
        + "\n"
    )
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
    except OSError:
        pass  # the note is for people reading the waiting line; the lock is what matters


@contextmanager
def device_locks(
    backend: str,
    devices: Sequence[int | str] = (),
    *,
    label: str = "",
    folder: Path | None = None,
    fds: list[int] | None = None,
) -> Iterator[list[Path]]:
    """Hold an exclusive lock on each device for the duration of the ``with`` block.

    Blocks until every lock is free, logging one line (with the holder's pid, host and run)
    when it has to wait and one when it got them. Locks are ``fcntl.flock`` locks on
    ``<folder>/afbench-<backend>-<device>.lock`` (``afbench-cpu.lock`` on cpu, whatever
    ``devices`` says), taken in sorted order and released when the block ends or the process
    dies; the files stay (an empty lock file is harmless and avoids unlink races).

    Args:
        backend: ``cpu``, ``cuda`` or ``npu``.
        devices: physical device entries (:func:`held_devices`); ignored on cpu.
        label: what holds the lock (the run), written into the lock file for waiters' logs.
        folder: the lock folder (default :func:`lock_dir`); created if missing.
        fds: a list that gets the locked file descriptors, for a worker to inherit (a lock
            is then held until the last process holding it ends, or the block ends).

    Yields:
        The lock files held.

    Raises:
        DeviceLockError: a lock file cannot be opened or created.
        KeyboardInterrupt: while waiting; nothing stays locked.
    """
    folder = lock_dir() if folder is None else Path(folder)
    paths = lock_paths(backend, devices, folder)
    held: list[int] = []
    try:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeviceLockError(
                f"device lock folder {folder}: {exc.strerror or exc}; set "
                f"{LOCK_DIR_ENV} to a folder you can write"
            ) from exc
        for path in paths:
            try:
                fd = _open_lock(path)
            except OSError as exc:
                raise DeviceLockError(
                    f"device lock {path}: {exc.strerror or exc} (another user's lock?); set "
                    f"{LOCK_DIR_ENV} to a folder every afbench user on this host can "
                    "write"
                ) from exc
            held.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                t0 = time.monotonic()
                log.warning(
                    "afbench: %s waits for device lock %s (held by %s)",
                    label or "run",
                    path,
                    _holder(fd),
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
                log.warning(
                    "afbench: %s got device lock %s after %.1f s",
                    label or "run",
                    path,
                    time.monotonic() - t0,
                )
            _note_holder(fd, label)
        if fds is not None:
            fds.extend(held)
        yield paths
    finally:
        for fd in reversed(held):
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
