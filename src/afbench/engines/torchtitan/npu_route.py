"""What ``engine.flavor=torchtitan_npu`` runs, said before it runs (``task=check``).

Two facts the command line alone does not show:

* **Which torchtitan.** torchtitan-npu is written against one torchtitan commit, pinned in its
  ``requirements.txt`` and ``.ci/setup_torchtitan.sh``:
  :data:`TORCHTITAN_NPU_TORCHTITAN` (``pip install -e '.[titan-npu]'`` installs it). The
  installed torchtitan's commit comes from its ``direct_url.json`` (a ``git+`` install); a
  PyPI release has none and is not that commit.
* **What ``autofuse`` means for the model.** afbench's ``autofuse=true`` passes
  ``--compile.enable``. torchtitan-npu wires AutoFuse proper (Inductor with
  ``npu_backend=ascendc`` through torchair's ``inductor_npu_ext``; kernels named
  ``autofused_*``) for DeepSeek-V3 and V4 only, per its docs (:data:`AUTOFUSE_MODELS`). For
  other models ``--compile.enable`` is ``torch.compile`` of torchtitan's ``apply_compile``,
  and torchtitan-npu's ``npu_bypass_triton_codegen`` converter clears Inductor's lowerings so
  Inductor generates no kernel: the AF ON side is graph capture, not an AutoFuse run.

Read from public torchtitan-npu sources (hicann/torchtitan-npu; the Qwen3 config
``sft_qwen3_1_7b_wordle`` of the reference appears only in a fork's
``torchtitan_npu/models/qwen3/config_registry.py``). Nothing here imports torch or
torchtitan, and nothing of torchtitan-npu has run with afbench: no NPU was available.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Sequence
from typing import Any

from afbench.config.engines import AFBENCH_TITAN_MODULE, TorchtitanEngine

#: The torchtitan commit torchtitan-npu pins (its requirements.txt, .ci/setup_torchtitan.sh).
TORCHTITAN_NPU_TORCHTITAN = "ac13e536c84e7f6647b14fa9375c3c8a8a2b8578"
TORCHTITAN_NPU_TORCHTITAN_URL = (
    f"git+https://github.com/pytorch/torchtitan.git@{TORCHTITAN_NPU_TORCHTITAN}"
)
#: Model families (torchtitan_npu.models.<family>) where torchtitan-npu runs AutoFuse proper.
AUTOFUSE_MODELS = ("deepseek_v3", "deepseek_v4")


def model_family(engine: TorchtitanEngine) -> str:
    """The model family a torchtitan config function builds: ``<family>`` of
    ``torchtitan_npu.models.<family>[...]``; ``qwen3`` for afbench's own
    (:data:`afbench.config.engines.AFBENCH_TITAN_MODULE`); else the module's last part."""
    parts = engine.module.split(".")
    if engine.module == AFBENCH_TITAN_MODULE:
        return "qwen3"
    if parts[:2] == ["torchtitan_npu", "models"] and len(parts) > 2:
        return parts[2]
    return parts[-1]


def autofuse_meaning(family: str) -> str:
    """One sentence: what ``autofuse=true`` (``--compile.enable``) is under torchtitan-npu
    for models of ``family``."""
    if family in AUTOFUSE_MODELS:
        return (
            f"{family}: --compile.enable is AutoFuse (Inductor, npu_backend=ascendc through "
            "torchair's inductor_npu_ext; kernels autofused_* in the op table)"
        )
    return (
        f"{family}: --compile.enable is torch.compile without AutoFuse (torchtitan-npu runs "
        f"AutoFuse for {' and '.join(AUTOFUSE_MODELS)} only; its npu_bypass_triton_codegen "
        "converter leaves Inductor no kernel to generate): autofuse=true here is not an "
        "AutoFuse run"
    )


def installed_torchtitan() -> tuple[str | None, str | None]:
    """(version, git commit) of the torchtitan installed beside afbench; the commit from its
    ``direct_url.json`` (None for a PyPI release or a plain folder), both None when absent."""
    try:
        dist = importlib.metadata.distribution("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        url = {}
    return dist.version, (url.get("vcs_info") or {}).get("commit_id")


def route_checks(runs: Sequence[Any]) -> list[dict]:
    """``task=check`` lines for the planned runs of ``engine.flavor=torchtitan_npu``: the
    torchtitan installed against the one torchtitan-npu pins (a failure unless it is that
    commit), and per model family what ``autofuse`` means; ``[]`` without such runs. Each a
    dict ``{item, ok, current, required, action}`` (afbench.preflight's ``Check``)."""
    engines = [
        r.config.engine for r in runs if getattr(r.config.engine, "flavor", "") == "torchtitan_npu"
    ]
    if not engines:
        return []
    version, commit = installed_torchtitan()
    if version is None:
        current = "not installed"
    else:
        current = f"{version} ({f'git {commit}' if commit else 'not a git install: no commit'})"
    checks = [
        {
            "item": "torchtitan for torchtitan-npu",
            "ok": commit == TORCHTITAN_NPU_TORCHTITAN,
            "current": current,
            "required": f"torchtitan at commit {TORCHTITAN_NPU_TORCHTITAN} (torchtitan-npu's pin)",
            "action": "pip install -e '.[titan-npu]' (installs torchtitan at that commit)",
        }
    ]
    for family in sorted({model_family(e) for e in engines}):
        checks.append(
            {
                "item": "autofuse under torchtitan-npu",
                "ok": True,
                "warn": family not in AUTOFUSE_MODELS,  # the run is not what the switch names
                "current": autofuse_meaning(family)
                + "; never run with afbench on an NPU (none was available)",
                "required": "",
                "action": "read autofuse=true's results as torch.compile's, not AutoFuse's"
                if family not in AUTOFUSE_MODELS
                else "",
            }
        )
    return checks
