"""The builtin SFT loop on the shipped tiny model (CPU, a few short steps): what it computes
does not depend on the AdamW implementation beyond float rounding, and result.json says which
implementation ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from afbench.assets.manifest import default_assets_dir
from afbench.backends import cpu as cpu_backend
from afbench.config.models import RunConfig
from afbench.engines import data as chat
from afbench.engines import sft
from afbench.engines.common import seed_everything
from afbench.runspec import RunSpec

TINY = default_assets_dir() / "qwen3_tiny"
DATA = default_assets_dir() / "wordle_sample" / "data" / "train-00000-of-00001.parquet"
SCHED = {
    "workload": "sft",
    "steps": 3,
    "seq_len": 64,
    "global_batch_size": 2,
    "micro_batch_size": 2,
    "measure": {"first_step": 2, "last_step": 3},
}


def make_spec(tmp_path: Path, name: str, **scheduler) -> RunSpec:
    run_dir = tmp_path / name
    run_dir.mkdir()
    config = RunConfig.model_validate(
        {
            "model": {"name": "qwen3_tiny", "path": str(TINY)},
            "data": {"name": "wordle_sample", "path": str(DATA), "max_samples": 8},
            "scheduler": {**SCHED, **scheduler},
            "backend": {"name": "cpu"},
        }
    )
    return RunSpec(
        run_id=f"{name}-train-r1",
        index=1,
        variant=name,
        phase="train",
        repeat=1,
        config=config,
        config_hash="0" * 64,
        run_dir=str(run_dir),
        timeout_s=600,
        kill_grace_s=2,
    )


def run(spec: RunSpec) -> tuple[dict, list[float]]:
    result = sft.run_sft(spec, cpu_backend.CpuBackend(), Path(spec.run_dir))
    lines = (Path(spec.run_dir) / "metrics.jsonl").read_text().splitlines()
    losses = [r["loss"] for r in map(json.loads, lines) if r["kind"] == "step"]
    return result, losses


def first_batch_loss(spec: RunSpec) -> float:
    """The HF loss of the loop's first batch on the freshly seeded model, computed here
    without the loop (what step 1 logged before any change to the loop)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    s = spec.config.scheduler
    seed_everything(s.seed)
    tok = AutoTokenizer.from_pretrained(TINY, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        TINY, dtype=torch.float32, attn_implementation="sdpa", local_files_only=True
    )
    model.train()
    convs = chat.load_conversations(DATA, 8)
    markers = chat.assistant_markers(tok)
    inputs, labels = chat.pack(
        [chat.tokenize_conversation(tok, c, markers) for c in convs], s.seq_len
    )
    idx = chat.BatchOrder(inputs.shape[0], s.seed).take(s.global_batch_size)
    with torch.no_grad():
        return float(model(input_ids=inputs[idx], labels=labels[idx]).loss)


def test_step_1_loss_is_the_hf_loss_of_the_first_batch_for_every_adamw_impl(tmp_path):
    expected = first_batch_loss(make_spec(tmp_path, "ref"))
    runs = {
        impl: run(make_spec(tmp_path, impl, optimizer_impl=impl))
        for impl in ("fused", "foreach", "for_loop")
    }
    for impl, (result, losses) in runs.items():
        assert losses[0] == expected, impl
        assert result.optimizer == {"name": "AdamW", "impl": impl, "requested": impl, "reason": ""}
    # later steps: the same update, rounded differently (fp32)
    base = runs["for_loop"][1]
    for impl in ("fused", "foreach"):
        assert runs[impl][1] == pytest.approx(base, rel=1e-5), impl


def test_fused_request_without_the_kernel_runs_foreach_and_says_why(tmp_path, monkeypatch):
    def missing(*args, **kwargs):
        raise NotImplementedError(
            "Could not run 'aten::_fused_adamw_' with arguments from the 'PrivateUse1' backend"
        )

    monkeypatch.setattr(torch, "_fused_adamw_", missing)
    result, losses = run(make_spec(tmp_path, "nofused"))
    assert result.optimizer["impl"] == "foreach"
    assert result.optimizer["requested"] == "fused"
    assert result.optimizer["reason"].startswith(
        "fused AdamW unavailable on cpu: NotImplementedError: Could not run"
    )
    assert len(losses) == 3


def test_optimizer_impl_accepts_only_the_three_names():
    with pytest.raises(ValueError, match="optimizer_impl"):
        RunConfig.model_validate(
            {
                "model": {"name": "m", "path": "/m"},
                "data": {"name": "d", "path": "/d"},
                "scheduler": {**SCHED, "optimizer_impl": "apex"},
            }
        )


def test_eager_run_reports_no_dynamo_graphs_without_importing_dynamo(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    assert sft.dynamo_unique_graphs() == 0
    assert "torch._dynamo.utils" not in sys.modules
