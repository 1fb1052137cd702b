"""Preflight of ``engine=torchtitan``: the installed torchtitan parses afbench's command line
for every planned run, and the known gaps between torchtitan and this torch are named before
anything runs.

Two halves. :func:`titan_preflight` (orchestrator side, no torch import) builds each run's
trainer options (:func:`afbench.engines.torchtitan.cmdline.trainer_args`) and environment and
hands them, as JSON on stdin, to ``<python> -m afbench.engines.torchtitan.probe`` on the
interpreter the runs use. :func:`main` (that subprocess) imports torch and torchtitan, parses
each command line with torchtitan's own ``ConfigManager`` (which calls the config function:
nothing is built on a device, nothing is trained) and checks, from the installed packages:

* ``triton`` importable (torchtitan 0.3.0's trainer imports its Triton kernels unconditionally);
* ``torch.distributed.set_timeout`` present when torchtitan calls it (torchtitan 0.3.0,
  ``distributed/utils.py: set_pg_timeouts``, after the first step; torch 2.13.0 lacks it);
* the device torchtitan picks (``torchtitan.tools.utils.device_type``: it has no CPU device
  and falls back to ``"cuda"``) against the planned backend; a cpu run of flavor torchtitan
  passes through afbench's CPU entry (:mod:`afbench.engines.torchtitan.cpu_entry`, which also
  stands in for ``set_timeout``);
* FSDP under ``--parallelism.spmd_backend spmd_types`` (torchtitan 0.3.0's default) at world
  size > 1 on a released torch: seen failing with torch 2.13.0 (issue 22), while
  ``partial_dtensor`` runs; torchtitan releases are tested against a torch nightly.

Each result is a dict ``{item, ok, current, required, action}`` (afbench.preflight's ``Check``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from afbench.config.engines import TorchtitanEngine
from afbench.engines.torchtitan.cmdline import (
    CPU_ENTRY,
    CPU_LABEL,
    DATA_ENV,
    MODEL_ENV,
    entry_module,
    trainer_args,
)
from afbench.errors import AfbenchError, RunSkipped

#: Prefix of the one stdout line that carries the probe's JSON result (torchtitan logs to
#: stdout too).
RESULT_PREFIX = "AFBENCH_TITAN_PROBE "
TESTED_TITAN = "0.3.0"
PROBE_TIMEOUT_S = 300.0


def _check(item: str, ok: bool, current: str, required: str = "", action: str = "") -> dict:
    return {"item": item, "ok": ok, "current": current, "required": required, "action": action}


def probe_request(runs: Sequence[Any]) -> dict[str, Any]:
    """The probe's input for planned RunSpecs whose engine is torchtitan: per run its id,
    backend, world size, ``--module/--config`` plus trainer options, the paths' environment,
    or the reason the run will be SKIPPED."""
    items = []
    for spec in runs:
        engine = spec.config.engine
        assert isinstance(engine, TorchtitanEngine)
        item: dict[str, Any] = {
            "run_id": spec.run_id,
            "backend": spec.backend,
            "flavor": engine.flavor,
            "entry": entry_module(engine, spec.backend),
            "world_size": spec.config.parallel.world_size,
            "env": {MODEL_ENV: spec.config.model.path, DATA_ENV: spec.config.data.path},
        }
        try:
            item["args"] = [
                "--module",
                engine.module,
                "--config",
                engine.config,
                *trainer_args(spec, engine),
            ]
        except RunSkipped as exc:
            item["skip"] = str(exc)
        items.append(item)
    return {"runs": items}


def titan_preflight(
    runs: Sequence[Any], python: str = sys.executable, timeout_s: float = PROBE_TIMEOUT_S
) -> list[dict]:
    """Run the probe for ``runs`` on ``python``; returns its checks (a crashed or silent probe
    is one failed check with the tail of its output)."""
    if not runs:
        return []
    request = json.dumps(probe_request(runs))
    try:
        out = subprocess.run(
            [python, "-m", "afbench.engines.torchtitan.probe"],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [
            _check(
                "torchtitan probe",
                False,
                f"{python}: {exc}",
                "the probe finishes",
                "run it by hand: python -m afbench.engines.torchtitan.probe",
            )
        ]
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
    return [
        _check(
            "torchtitan probe",
            False,
            f"exit status {out.returncode}: {tail[-400:]}",
            "the probe prints its result",
            "fix the error above",
        )
    ]


# --- inside the probe process (torch and torchtitan imported here only) ----------------------


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a finder refusing it
        return False


def _tyro_message(text: str) -> str:
    """The first section of tyro's error that says something (``Unrecognized options: ...``),
    one line; tyro draws it in a box on a terminal, between ``---`` rules otherwise."""
    sections, current = [], []
    for line in text.splitlines():
        line = line.strip("│╭╰╮╯ ")
        if line and set(line) <= set("-─"):
            sections.append(current)
            current = []
        elif line:
            current.append(line.strip("─ "))
    sections.append(current)
    said = [" ".join(sec) for sec in sections if sec and ":" in " ".join(sec)]
    return next(
        (s for s in said if not s.startswith("For full helptext")),
        " ".join(" ".join(sec) for sec in sections),
    )[:400]


def package_checks(flavor: str) -> tuple[list[dict], bool]:
    """torchtitan (and torchtitan-npu for that flavor) and triton installed; returns the
    checks and whether torchtitan can be imported at all."""
    titan, torch_v = _version("torchtitan"), _version("torch")
    checks = []
    if titan is None or not _findable("torchtitan"):
        checks.append(
            _check(
                "torchtitan",
                False,
                f"not installed beside torch {torch_v}",
                f"torchtitan=={TESTED_TITAN}",
                "pip install -e '.[titan]'",
            )
        )
        return checks, False
    pin = "" if titan == TESTED_TITAN else f" (afbench is tested with {TESTED_TITAN})"
    checks.append(_check("torchtitan", True, f"{titan} beside torch {torch_v}{pin}"))
    if flavor == "torchtitan_npu":
        npu = _version("torchtitan-npu") or _version("torchtitan_npu")
        checks.append(
            _check(
                "torchtitan-npu",
                npu is not None,
                str(npu or "not installed"),
                "torchtitan-npu and the torchtitan it is written for",
                "install torchtitan-npu (docs/accelerators.md lists the pairs)",
            )
        )
    if not _findable("triton"):
        checks.append(
            _check(
                "triton",
                False,
                f"not installed (torchtitan {titan} imports it)",
                "triton importable",
                "pip install triton (or '.[titan]')",
            )
        )
    else:
        checks.append(_check("triton", True, str(_version("triton"))))
    return checks, True


def set_timeout_check(
    has_set_timeout: bool, titan_calls_it: bool, torch_v: str, titan_v: str, cpu_entry: bool = False
) -> dict | None:
    """FAIL when torchtitan calls ``torch.distributed.set_timeout`` and torch lacks it, unless
    every run goes through afbench's CPU entry (``cpu_entry``), which stands in for it."""
    if not titan_calls_it:
        return None
    item = "torch.distributed.set_timeout"
    if has_set_timeout:
        return _check(item, True, f"present in torch {torch_v}")
    if cpu_entry:
        return _check(
            item,
            True,
            f"missing in torch {torch_v}; {CPU_ENTRY} stands in (torch's _set_pg_timeout)",
        )
    return _check(
        item,
        False,
        f"missing in torch {torch_v}; torchtitan {titan_v} calls it after "
        "step 1 (distributed/utils.py set_pg_timeouts)",
        "a torch that has it (the torch nightly torchtitan's release was tested with)",
        "install a torch that has torch.distributed.set_timeout (torchtitan releases "
        "are tested with a torch nightly of their date: docs/accelerators.md, "
        f"'supported pairs'), or a torchtitan release written for torch {torch_v}",
    )


def device_check(backend: str, titan_device: str, titan_v: str, entry: str | None = None) -> dict:
    """The device torchtitan will use against the planned backend; a cpu run through
    ``entry`` = afbench's CPU entry passes (labelled :data:`CPU_LABEL`)."""
    item = "torchtitan device"
    if backend == "cpu" and entry == CPU_ENTRY:
        return _check(item, True, f"cpu through {CPU_ENTRY} ({CPU_LABEL})")
    if backend == titan_device:
        return _check(item, True, f"{titan_device} (planned backend {backend})")
    if backend == "cpu":
        return _check(
            item,
            False,
            f"planned backend cpu under entry {entry}; torchtitan {titan_v} has no CPU device "
            f"(it would use {titan_device!r}), and torch has no FlexAttention backward "
            "on CPU",
            f"engine.flavor=torchtitan with engine.entry unset ({CPU_ENTRY}), or an accelerator",
            "leave engine.entry unset on cpu (flavor torchtitan), run on an accelerator "
            "machine, or use engine=builtin",
        )
    return _check(
        item,
        False,
        f"torchtitan would use {titan_device!r}, planned backend {backend}",
        f"torchtitan on {backend}",
        "install the device's torch (torch_npu + torchtitan-npu for npu)",
    )


def fsdp_check(
    run_id: str, world_size: int, spmd_backend: str, shard_degree: int, torch_v: str, titan_v: str
) -> dict | None:
    """FAIL for FSDP under ``spmd_types`` at world size > 1 on a released torch."""
    fsdp = world_size > 1 and shard_degree != 1
    if not fsdp or spmd_backend != "spmd_types" or any(t in torch_v for t in ("dev", "git")):
        return None
    return _check(
        f"torchtitan FSDP {run_id}",
        False,
        f"world size {world_size}, FSDP under --parallelism.spmd_backend spmd_types "
        f"(torchtitan {titan_v}'s default) fails with torch {torch_v}",
        "partial_dtensor on a released torch",
        "engine.extra_args=[--parallelism.spmd_backend,partial_dtensor]",
    )


def parse_run(run: dict[str, Any], titan_v: str) -> tuple[dict, Any]:
    """Parse one run's options with torchtitan's ``ConfigManager`` under its environment;
    returns the check and the parsed ``Trainer.Config`` (None when it failed)."""
    from torchtitan.config.manager import ConfigManager

    item = f"torchtitan command line {run['run_id']}"
    if "skip" in run:
        return _check(
            item,
            True,
            f"nothing to parse: afbench will mark this run SKIPPED, not start it ({run['skip']})",
        ), None
    saved = {k: os.environ.get(k) for k in run["env"]}
    os.environ.update(run["env"])
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            config = ConfigManager().parse_args(list(run["args"]))
    except (Exception, SystemExit) as exc:  # tyro exits on a bad option
        if isinstance(exc, AfbenchError):  # afbench's config function: the model folder
            return _check(
                item,
                False,
                f"config function failed: {exc.args[0]}",
                "a model.path torchtitan's Qwen3 can build",
                "set model.path to a dense Qwen3 HF folder",
            ), None
        why = _tyro_message(sink.getvalue()) or f"{type(exc).__name__}: {exc}"
        return _check(
            item,
            False,
            f"rejected by torchtitan {titan_v}: {why[:400]}",
            "torchtitan accepts every option afbench passes",
            "fix engine.module / engine.config / engine.extra_args, or install the "
            "torchtitan afbench is tested with",
        ), None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    spec = getattr(config, "model_spec", None)
    model = f", model {spec.name}/{spec.flavor}" if spec is not None else ""
    return _check(
        item,
        True,
        f"accepted by torchtitan {titan_v} ConfigManager "
        f"({run['args'][1]}.{run['args'][3]}{model})",
    ), config


def probe(request: dict[str, Any]) -> list[dict]:
    """All checks for ``request`` (see :func:`probe_request`), in this process."""
    runs = request["runs"]
    flavors = {r["flavor"] for r in runs}
    checks, importable = package_checks(
        "torchtitan_npu" if "torchtitan_npu" in flavors else "torchtitan"
    )
    if not importable:
        return checks
    import inspect

    import torch

    if "torchtitan_npu" in flavors and _findable("torch_npu"):
        import torch_npu  # noqa: F401  (registers the npu device torchtitan looks for)
    if "torchtitan_npu" in flavors and _findable("torchtitan_npu"):
        # its package import applies its patches to torchtitan (config sections, data
        # loaders), as its entry does before parsing
        import torchtitan_npu  # noqa: F401
    import torchtitan.distributed.utils as titan_dist
    from torchtitan.tools.utils import device_type

    torch_v, titan_v = torch.__version__, str(_version("torchtitan"))
    gap = set_timeout_check(
        hasattr(torch.distributed, "set_timeout"),
        "distributed.set_timeout(" in inspect.getsource(titan_dist),
        torch_v,
        titan_v,
        cpu_entry=all(r.get("entry") == CPU_ENTRY for r in runs),
    )
    checks += [gap] if gap else []
    for backend, entry in sorted({(r["backend"], r.get("entry")) for r in runs}):
        checks.append(device_check(backend, device_type, titan_v, entry))
    for run in runs:
        check, config = parse_run(run, titan_v)
        checks.append(check)
        if config is not None:
            p = config.parallelism
            fsdp = fsdp_check(
                run["run_id"],
                run["world_size"],
                getattr(p, "spmd_backend", ""),
                getattr(p, "data_parallel_shard_degree", -1),
                torch_v,
                titan_v,
            )
            checks += [fsdp] if fsdp else []
    return checks


def main() -> None:
    """Read the request (JSON) from stdin; print ``RESULT_PREFIX`` + the checks (JSON)."""
    request = json.loads(sys.stdin.read())
    try:
        checks = probe(request)
    except Exception as exc:  # an import error of torchtitan itself: one failed check
        checks = [
            _check(
                "torchtitan import",
                False,
                f"{type(exc).__name__}: {str(exc)[:400]}",
                "torchtitan imports beside this torch",
                "install the torch / torchtitan pair of docs/accelerators.md",
            )
        ]
    print(RESULT_PREFIX + json.dumps(checks), flush=True)


if __name__ == "__main__":
    main()
