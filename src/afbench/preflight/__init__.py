"""Preflight: checks run before every experiment, one ``[PASS]``/``[FAIL]`` line each.

Line format (docs/reference.md §1, the AutoFuse quick-start's preflight)::

    [PASS] item: current <what was found>
    [WARN] item: current <what was found>; action <what to keep in mind> (passes: afbench's own
           addition, for a run that goes ahead but is not what its switch names)
    [FAIL] item: current <what was found>; required <what is needed>; action <what to do>

Every check is a function of its inputs returning :class:`Check` objects, so each one can be
tested on a fake tree in a temporary folder; :func:`run_preflight` picks the checks that apply
to a composed config (:func:`afbench.experiment.preflight` turns FAIL lines into a
:class:`~afbench.errors.PreflightError`). Nothing here runs a shell: external commands are argv
lists with a timeout.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from afbench.assets.manifest import verify_manifest
from afbench.backends.resolve import probe_backend, resolve_backend
from afbench.config.models import CHAT_COLUMNS, AfbenchConfig, InferScheduler
from afbench.engines.torchtitan.npu_route import route_checks
from afbench.engines.torchtitan.probe import titan_preflight
from afbench.preflight.cann import (
    CANN_COMPONENTS,
    CANN_ENV_VARS,
    DEFAULT_MIN_CANN_DATE,
    EXAMPLE_CANN_ROOT,
    NPU_SMI_COMMANDS,
    NPU_SMI_TIMEOUT_S,
    cann_build_dates,
    check_cann,
    check_cann_dates,
    check_cann_layout,
    check_npu_smi,
    find_cann_root,
    read_build_date,
)
from afbench.preflight.check import Check

# the CANN checks' names, for callers and tests that read them here
__all__ = [
    "CANN_COMPONENTS",
    "CANN_ENV_VARS",
    "DEFAULT_MIN_CANN_DATE",
    "EXAMPLE_CANN_ROOT",
    "NPU_SMI_COMMANDS",
    "NPU_SMI_TIMEOUT_S",
    "Check",
    "cann_build_dates",
    "check_cann",
    "check_cann_dates",
    "check_cann_layout",
    "check_npu_smi",
    "find_cann_root",
    "read_build_date",
    "run_preflight",
]

DEFAULT_MIN_FREE_GIB = 1.0
MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 4)
# Distributions whose versions the report records (pip names).
REPORTED_PACKAGES = ("torch", "transformers", "hydra-core", "pydantic", "pandas")


# --- platform and packages -------------------------------------------------------------------


def check_platform(
    backend: str,
    *,
    system: str | None = None,
    machine: str | None = None,
    release: str | None = None,
) -> Check:
    """The OS and CPU architecture: Linux aarch64 for ``npu`` (Ascend hosts, as the reference
    requires), Linux or macOS otherwise. ``system``/``machine``/``release`` default to
    :mod:`platform`'s answers."""
    system = system if system is not None else platform.system()
    machine = machine if machine is not None else platform.machine()
    release = release if release is not None else platform.release()
    current = f"{system} {machine} ({release})" if release else f"{system} {machine}"
    if backend == "npu":
        ok = system == "Linux" and machine in ("aarch64", "arm64")
        return Check(
            "platform",
            ok,
            current,
            "Linux aarch64 for backend npu",
            "run on a Linux aarch64 Ascend host, or choose another backend "
            "(backend=cpu or backend=cuda)",
        )
    ok = system in ("Linux", "Darwin")
    return Check(
        "platform", ok, current, "Linux or macOS", "run afbench on Linux or macOS (WSL2 on Windows)"
    )


def check_python(version_info: Sequence[int] | None = None) -> Check:
    """Python >= 3.10 (``version_info`` defaults to ``sys.version_info``)."""
    v = tuple(version_info if version_info is not None else sys.version_info)[:3]
    current = ".".join(str(x) for x in v)
    ok = v[:2] >= MIN_PYTHON
    req = ".".join(map(str, MIN_PYTHON))
    return Check(
        "python",
        ok,
        f"{current} ({sys.executable})",
        f">= {req}",
        f"create the environment with Python >= {req} and reinstall afbench (pip install -e .)",
    )


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric release of a version string: ``"2.13.0+cpu"`` -> ``(2, 13, 0)``."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def package_version(dist: str) -> str | None:
    """Installed version of a distribution (pip name), or None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_packages(versions: Mapping[str, str | None] | None = None) -> list[Check]:
    """One check per reported package: installed, and torch >= 2.4.

    ``versions`` maps pip names to versions (None = not installed); by default they are read
    from the installed distributions' metadata (no import, so this is cheap).
    """
    if versions is None:
        versions = {dist: package_version(dist) for dist in REPORTED_PACKAGES}
    checks = []
    for dist, version in versions.items():
        if version is None:
            checks.append(
                Check(
                    dist,
                    False,
                    "not installed",
                    "installed",
                    f"pip install -e . (afbench's dependencies include {dist})",
                )
            )
        elif dist == "torch":
            req = ".".join(map(str, MIN_TORCH))
            checks.append(
                Check(
                    dist,
                    version_tuple(version) >= MIN_TORCH,
                    version,
                    f">= {req}",
                    f"pip install 'torch>={req}' (for npu: the torch that your "
                    "torch_npu release names)",
                )
            )
        else:
            checks.append(Check(dist, True, version, "installed"))
    return checks


# --- backend and devices ---------------------------------------------------------------------


def check_backend(requested: str, resolved: str, device_count: int | None, problem: str) -> Check:
    """The resolved backend is usable (``problem`` empty, as
    :func:`afbench.backends.resolve.probe_backend` reports)."""
    shown = f"{requested} -> {resolved}" if requested != resolved else resolved
    if not problem:
        devices = "" if device_count is None else f", {device_count} device(s)"
        return Check("backend", True, f"{shown}{devices}")
    if resolved == "npu":
        action = (
            "pip install afbench[npu] (torch_npu matching torch), source "
            "<backend.cann_root>/set_env.sh, check ASCEND_RT_VISIBLE_DEVICES; or set "
            "backend=cpu"
        )
    elif resolved == "cuda":
        action = (
            "install a CUDA build of torch and check CUDA_VISIBLE_DEVICES and the driver "
            "(nvidia-smi); or set backend=cpu"
        )
    else:
        action = "set backend=auto, backend=cpu, backend=cuda or backend=npu"
    return Check(
        "backend", False, f"{shown}: {problem}", f"backend {resolved} usable by torch", action
    )


def check_devices(
    backend: str, devices: Sequence[int] | None, world_size: int, device_count: int | None
) -> Check:
    """``parallel.devices``: null on cpu; on cuda/npu distinct, non-negative and below the
    device count (null means ``0..world_size-1``)."""
    if backend == "cpu":
        if devices is None:
            return Check("parallel.devices", True, f"null (cpu, world_size {world_size})")
        return Check(
            "parallel.devices",
            False,
            f"{list(devices)} on cpu",
            "null on backend cpu",
            "set parallel.devices=null (device ids apply to cuda/npu only)",
        )
    ids = list(devices) if devices is not None else list(range(world_size))
    shown = f"{ids}" if devices is not None else f"null -> {ids}"
    count = device_count or 0
    problems = []
    duplicates = sorted({d for d in ids if ids.count(d) > 1})
    if duplicates:
        problems.append(f"duplicate id(s) {duplicates}")
    bad = [d for d in ids if d < 0 or d >= count]
    if bad:
        problems.append(f"id(s) {bad} outside 0..{count - 1}")
    current = f"{shown} of {count} {backend} device(s)"
    if not problems:
        return Check("parallel.devices", True, current)
    example = ",".join(str(i) for i in range(min(len(ids), count))) if count else "0"
    return Check(
        "parallel.devices",
        False,
        f"{current}: {', '.join(problems)}",
        f"distinct ids in 0..{count - 1}, one per process",
        f"set parallel.devices=[{example}] (and parallel.world_size to match)",
    )


# --- output root and disk --------------------------------------------------------------------


def check_output_root(root: Path) -> Check:
    """The output root (docs/reference.md §1 Output safety): not a symlink, a directory owned by the
    current user, not group- or world-writable. A missing root must be creatable: its nearest
    existing parent is a directory where a folder can be made (tried with a temporary folder,
    removed at once; nothing else is created: the run makes the root when it starts)."""
    root = Path(root)
    item = "output root"
    if root.is_symlink():
        return Check(
            item,
            False,
            f"{root} is a symlink to {os.readlink(root)}",
            "a real directory, not a symlink",
            f"remove the symlink {root} or pass the directory it points to",
        )
    if not root.exists():
        parent = _existing_ancestor(root)
        try:
            if not parent.is_dir():
                raise NotADirectoryError(f"{parent} is not a directory")
            tempfile.TemporaryDirectory(dir=parent, prefix=".afbench-check-").cleanup()
        except OSError as exc:
            return Check(
                item,
                False,
                f"{root} cannot be created in {parent}: {exc.strerror or exc}",
                "a folder the current user can create",
                "run in a folder you can write, or pass an output root there "
                "(hydra.run.dir=..., for sweeps hydra.sweep.dir=...)",
            )
        return Check(item, True, f"{root} (to be created in {parent})")
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode):
        return Check(
            item,
            False,
            f"{root} is not a directory",
            "a directory",
            f"remove {root} or pass another output root",
        )
    mode = stat.S_IMODE(st.st_mode)
    uid = os.getuid()
    if st.st_uid != uid:
        return Check(
            item,
            False,
            f"{root} owned by uid {st.st_uid}",
            f"owned by the current user (uid {uid})",
            f"pass an output root you own, or run chown {uid} {root}",
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return Check(
            item,
            False,
            f"{root} mode {mode:04o}",
            "not group- or world-writable",
            f"run chmod go-w {root}",
        )
    return Check(item, True, f"{root} (mode {mode:04o}, uid {uid})")


def _existing_ancestor(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(root: Path, min_free_gib: float = DEFAULT_MIN_FREE_GIB) -> Check:
    """Free space (``shutil.disk_usage``) on the file system of ``root`` (or of its nearest
    existing parent) is at least ``min_free_gib`` GiB."""
    where = _existing_ancestor(root)
    free_gib = shutil.disk_usage(where).free / 2**30
    ok = free_gib >= min_free_gib
    return Check(
        "free disk",
        ok,
        f"{free_gib:.1f} GiB free at {where}",
        f">= {min_free_gib:g} GiB",
        "free space there or pass an output root on a larger file system (hydra.run.dir=...)",
    )


# --- assets ----------------------------------------------------------------------------------


def check_manifest(manifest: str | Path | None) -> Check:
    """Every file listed in the sha256 manifest (``model.manifest``) matches; null = skipped."""
    if manifest is None:
        return Check("model.manifest", True, "null (no integrity check)")
    manifest = Path(manifest)
    if not manifest.is_file():
        return Check(
            "model.manifest",
            False,
            f"{manifest} does not exist",
            "an existing manifest",
            "rebuild the assets (python -m afbench.assets build) or set "
            "model.manifest=/abs/path/to/assets.sha256",
        )
    problems = verify_manifest(manifest)
    if problems:
        return Check(
            "model.manifest",
            False,
            f"{len(problems)} problem(s) in {manifest}: " + " | ".join(problems),
            "every listed file present with its sha256",
            "restore the listed files (python -m afbench.assets build rebuilds the "
            "default assets) or point model.manifest at the manifest of these files",
        )
    return Check("model.manifest", True, f"all files listed in {manifest} match")


#: Weight index files of an HF folder (``weight_map``: tensor -> shard file).
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
#: Single-file weights transformers loads without an index.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
#: Any one of them lets transformers' AutoTokenizer load the folder's tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def _weights(folder: Path) -> tuple[bool, str]:
    """(whether ``folder`` holds weights transformers can load, what was found): a
    :data:`WEIGHT_FILES` file, or a :data:`WEIGHT_INDEXES` index whose every shard exists."""
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return True, f"{folder / name}"
    for name in WEIGHT_INDEXES:
        index = folder / name
        if not index.is_file():
            continue
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return False, f"{index} unreadable ({type(exc).__name__}: no weight_map)"
        missing = [f for f in shards if not (folder / f).is_file()]
        if missing or not shards:
            return False, (
                f"{index} names {len(shards)} shard(s), {len(missing)} missing: "
                + ", ".join(str(folder / f) for f in missing[:3])
            )
        return True, f"{index} ({len(shards)} shards)"
    return False, f"{folder} has no weight file ({' / '.join(WEIGHT_FILES + WEIGHT_INDEXES)})"


def check_model(path: str | Path, weights: bool = True) -> Check:
    """``model.path`` is an HF-format folder: ``config.json`` and, when the engine loads the
    weights itself (``weights``), loadable weights (:func:`_weights`): a folder without them
    would fail every run after its start-up."""
    folder = Path(path)
    config = folder / "config.json"
    if not config.is_file():
        return Check(
            "model.path",
            False,
            f"{config} not found",
            "an HF-format model folder with config.json",
            "set model.path=/abs/path/to/hf_model_folder",
        )
    if not weights:
        return Check("model.path", True, str(path))
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        return Check(
            "model.path",
            False,
            f"{folder} has no tokenizer file ({' / '.join(TOKENIZER_FILES)})",
            "the model's tokenizer files",
            "copy the tokenizer files into the folder, or set model.path to a folder that has them",
        )
    ok, found = _weights(folder)
    if ok:
        return Check("model.path", True, f"{path} (weights {found})")
    return Check(
        "model.path",
        False,
        found,
        "weights: model.safetensors, pytorch_model.bin, or an index whose shards all exist",
        "copy the weight files into the folder (or rebuild the assets: python "
        "-m afbench.assets build), or set model.path to a folder that has them",
    )


def check_data(conf: AfbenchConfig) -> Check:
    """The data file exists: ``data.prompts_file`` for inference when set, else ``data.path``;
    for the engines that read ``data.path`` themselves (builtin, torchtitan: not the command
    engine, whose program reads it) it is a parquet file with the chat columns
    (:data:`afbench.config.models.CHAT_COLUMNS`), read from its footer only."""
    if isinstance(conf.scheduler, InferScheduler) and conf.data.prompts_file:
        key, path, example = "data.prompts_file", Path(conf.data.prompts_file), "prompts.jsonl"
    else:
        key, path, example = "data.path", Path(conf.data.path), "file.parquet"
    if not path.is_file():
        return Check(
            key, False, f"{path} not found", "an existing file", f"set {key}=/abs/path/to/{example}"
        )
    if key == "data.path" and conf.engine.name != "command":
        return check_chat_parquet(path)
    if (
        key == "data.prompts_file"
        and not path.read_text(encoding="utf-8", errors="replace").strip()
    ):
        return Check(
            key,
            False,
            f"{path} is empty",
            "at least one prompt (a JSON line)",
            f"write prompts into {path}, or set {key}=null for the data file's",
        )
    return Check(key, True, str(path))


def check_chat_parquet(path: Path) -> Check:
    """``path`` is a parquet file whose columns hold one of :data:`CHAT_COLUMNS`."""
    import pyarrow.parquet as pq  # 0.15 s: only when a data file is checked

    required = " or ".join(" + ".join(f"'{c}'" for c in cols) for cols in CHAT_COLUMNS)
    try:
        names = set(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow.ArrowInvalid and OSError: not a parquet file
        why = " ".join(str(exc).split())
        return Check(
            "data.path",
            False,
            f"{path} is not a parquet file ({why})",
            f"a chat parquet file with {required} columns",
            "set data.path=/abs/path/to/file.parquet (e.g. willcb/V3-wordle's "
            "data/train-00000-of-00001.parquet)",
        )
    cols = next((c for c in CHAT_COLUMNS if set(c) <= names), None)
    if cols is None:
        return Check(
            "data.path",
            False,
            f"{path} has columns {sorted(names)}",
            f"{required} columns (lists of {{role, content}})",
            "convert the file to the chat schema, or set data.path to one that has it",
        )
    rows = _usable_rows(path, cols)
    if rows == 0:
        return Check(
            "data.path",
            False,
            f"{path} has no row with a conversation in "
            f"{' + '.join(cols)} (every run would stop at loading it)",
            "at least one non-empty conversation",
            "set data.path to a chat parquet file with rows (e.g. willcb/V3-wordle's "
            "data/train-00000-of-00001.parquet)",
        )
    return Check("data.path", True, f"{path}" + (f" ({rows} rows)" if rows else ""))


#: A data file up to this size has its chat columns read to count usable rows (a larger one:
#: its row count from the footer only, so the check stays within seconds).
USABLE_ROWS_MAX_BYTES = 256 * 2**20


def _usable_rows(path: Path, cols: tuple[str, ...]) -> int | None:
    """Rows of ``path`` whose chat ``cols`` hold a non-empty list (as
    :func:`afbench.engines.data.load_conversations` keeps them); 0 from the footer alone for
    a file without rows; ``None`` for a larger file with rows (not read)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if pq.ParquetFile(path).metadata.num_rows == 0:
        return 0
    if path.stat().st_size > USABLE_ROWS_MAX_BYTES:
        return None
    table = pq.read_table(path, columns=list(cols))
    usable = None
    for c in cols:
        column = table.column(c)
        has = (
            pc.fill_null(pc.greater(pc.list_value_length(column), 0), False)
            if hasattr(column.type, "value_type")
            else pc.is_valid(column)
        )
        usable = has if usable is None else pc.or_(usable, has)
    return int(pc.sum(usable).as_py() or 0)


def check_assets(conf: AfbenchConfig) -> list[Check]:
    """Manifest integrity, model folder (with its weights where afbench's engine loads them:
    builtin, torchtitan with ``hf_assets``) and data file."""
    engine = conf.engine
    weights = engine.name == "builtin" or (
        engine.name == "torchtitan" and getattr(engine, "hf_assets", False)
    )
    return [
        check_manifest(conf.model.manifest),
        check_model(conf.model.path, weights),
        check_data(conf),
    ]


# --- CANN (npu only): afbench.preflight.cann ---------------------------------------------------


def check_torchtitan(runs: Sequence[Any]) -> list[Check]:
    """engine=torchtitan: the installed torchtitan parses every planned run's command line
    with its own ConfigManager, and the known torch / torchtitan gaps are named
    (:mod:`afbench.engines.torchtitan.probe`, in a subprocess on the runs' interpreter); for
    ``engine.flavor=torchtitan_npu`` also which torchtitan and what ``autofuse`` means for the
    model (:mod:`afbench.engines.torchtitan.npu_route`)."""
    return [Check(**c) for c in [*titan_preflight(runs), *route_checks(runs)]]


# --- everything ------------------------------------------------------------------------------


def run_preflight(
    conf: AfbenchConfig,
    output_root: Path,
    *,
    min_free_gib: float | None = None,
    min_cann_date: str = DEFAULT_MIN_CANN_DATE,
    runs: Sequence[Any] = (),
) -> list[Check]:
    """Run every check that applies to ``conf`` and return them in order (raises nothing for a
    failed check).

    Order: platform, python, packages, backend, parallel.devices, output root (created 0700 if
    missing), free disk (``min_free_gib``, default 1.0 GiB), model.manifest, model.path, data,
    then on npu the CANN root, five build dates (>= ``min_cann_date``) and npu-smi, then for
    the planned ``runs`` (RunSpecs) that use engine=torchtitan :func:`check_torchtitan`.
    """
    min_free = DEFAULT_MIN_FREE_GIB if min_free_gib is None else min_free_gib
    requested = conf.backend.name
    resolved = resolve_backend(requested)
    count, problem = probe_backend(resolved)
    checks = [
        check_platform(resolved),
        check_python(),
        *check_packages(),
        check_backend(requested, resolved, count, problem),
    ]
    if not problem:  # the device ids mean nothing without a usable backend
        checks.append(check_devices(resolved, conf.parallel.devices, conf.parallel.per_node, count))
    checks.append(check_output_root(Path(output_root)))
    checks.append(check_disk(Path(output_root), min_free))
    checks += check_assets(conf)
    if resolved == "npu":
        checks += check_cann(conf, min_date=min_cann_date)
    titan_runs = [r for r in runs if r.config.engine.name == "torchtitan"]
    if titan_runs:
        checks += check_torchtitan(titan_runs)
    return checks
