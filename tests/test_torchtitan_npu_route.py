"""``engine.flavor=torchtitan_npu`` says, before anything runs, which torchtitan it needs (the
commit torchtitan-npu pins) and what ``autofuse`` means for the model (issue 31 item 5). No NPU
here: ``task=check`` runs on this CPU machine, where the torchtitan installed is a PyPI release
(or none), so the torchtitan line fails naming the pin and the extra that installs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from afbench.config.engines import TorchtitanEngine
from afbench.engines.torchtitan.npu_route import (
    TORCHTITAN_NPU_TORCHTITAN,
    autofuse_meaning,
    model_family,
)

REPO = Path(__file__).resolve().parents[1]
PIN = "ac13e536c84e7f6647b14fa9375c3c8a8a2b8578"  # torchtitan-npu's .ci/setup_torchtitan.sh


def test_check_says_which_torchtitan_and_what_autofuse_means_for_the_model(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "task=check",
            "engine=torchtitan",
            "engine.flavor=torchtitan_npu",
            f"hydra.run.dir={tmp_path / 'out'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = done.stdout + done.stderr
    lines = text.splitlines()
    titan = [ln for ln in lines if ln.startswith("[FAIL] torchtitan for torchtitan-npu:")]
    assert len(titan) == 1, text
    assert re.match(
        r"\[FAIL\] torchtitan for torchtitan-npu: current (not installed|\S+ \(not a git "
        rf"install: no commit\)); required torchtitan at commit {PIN} \(torchtitan-npu's pin\); "
        r"action pip install -e '\.\[titan-npu\]'",
        titan[0],
    ), titan[0]
    autofuse = [ln for ln in lines if "] autofuse under torchtitan-npu:" in ln]
    assert autofuse == [  # a warning, not a pass: the switch does not do what it names
        "[WARN] autofuse under torchtitan-npu: current qwen3: --compile.enable is torch.compile "
        "without AutoFuse (torchtitan-npu runs AutoFuse for deepseek_v3 and deepseek_v4 only; "
        "its npu_bypass_triton_codegen converter leaves Inductor no kernel to generate): "
        "autofuse=true here is not an AutoFuse run; never run with afbench on an NPU (none was "
        "available); action read autofuse=true's results as torch.compile's, not AutoFuse's"
    ], text
    assert done.returncode != 0 and "nothing was run" in text


def test_the_pin_is_torchtitan_npus_and_the_extra_installs_it():
    assert TORCHTITAN_NPU_TORCHTITAN == PIN
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'titan-npu = ["torchtitan @ git+https://github.com/pytorch/torchtitan.git@{PIN}"]' in (
        pyproject
    )


def test_autofuse_means_autofuse_only_for_deepseek_v3_and_v4():
    npu = TorchtitanEngine(flavor="torchtitan_npu")
    assert model_family(npu) == "qwen3"
    own = TorchtitanEngine(flavor="torchtitan_npu", module="afbench.engines.torchtitan.qwen3")
    assert model_family(own) == "qwen3"
    v4 = TorchtitanEngine(
        flavor="torchtitan_npu", module="torchtitan_npu.models.deepseek_v4", config="x"
    )
    assert model_family(v4) == "deepseek_v4"
    assert "is AutoFuse (Inductor, npu_backend=ascendc" in autofuse_meaning("deepseek_v4")
    assert "is AutoFuse (" in autofuse_meaning("deepseek_v3")
    for family in ("qwen3", "llama3", "deepseek_v32"):
        assert "not an AutoFuse run" in autofuse_meaning(family), family
