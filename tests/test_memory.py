"""Peak memory of the measured window, TFLOPs/MFU and KV-cache size as the builtin engine
records them (afbench.engines.efficiency, afbench.backends.cpu), including real CPU runs of the
shipped tiny model."""

from __future__ import annotations

import contextlib
import json
import resource
import sys
from pathlib import Path

import pytest
import torch

from afbench.analysis import flops
from afbench.assets.manifest import default_assets_dir
from afbench.backends import cpu as cpu_backend
from afbench.backends.base import GIB
from afbench.config.models import RunConfig, StepWindow
from afbench.engines import efficiency
from afbench.engines.distributed import DistInfo
from afbench.engines.metrics import MetricsWriter
from afbench.messages import Message, say
from afbench.runspec import RunSpec

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
TINY = default_assets_dir() / "qwen3_tiny"
DATA = default_assets_dir() / "wordle_sample" / "data" / "train-00000-of-00001.parquet"


def touch(mib: int) -> torch.Tensor:
    return torch.ones(mib * 2**20 // 4, dtype=torch.float32)  # ones: every page resident


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@linux_only
def test_cpu_peak_rss_window_excludes_what_warm_up_held(tmp_path):
    backend = cpu_backend.CpuBackend()
    with contextlib.closing(MetricsWriter(tmp_path / "metrics.jsonl")) as metrics:
        window = efficiency.MeasuredWindow(
            backend, StepWindow(first_step=2, last_step=3), metrics, DistInfo()
        )
        for step, mib in ((1, 512), (2, 64), (3, 128)):
            window.before_step(step)
            buf = touch(mib)
            del buf  # a large buffer is mmap'ed, so freeing it gives the pages back
            window.after_step(step, 0.5)
            if step == 1:  # the process's peak so far, warm-up included (nothing reset yet)
                warm_up_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB
    peak = window.peak
    assert peak.source.key == cpu_backend.HWM_SOURCE
    # the window's own 128 MiB buffer is in the peak; the warm-up's 512 MiB is not
    assert peak.peak_rss_gib * 1024 >= 128
    assert peak.peak_rss_gib < warm_up_peak - 256 / 1024
    assert (window.steps, window.seconds) == (2, 1.0)
    (rec,) = read_records(tmp_path / "metrics.jsonl")
    assert rec["kind"] == "memory" and rec["peak_rss_gib"] == peak.peak_rss_gib
    assert rec["memory_window"]["text"] == "steps 2-3 (counters reset after 1 warm-up steps)"
    assert rec["memory_window"]["args"] == {"first": 2, "last": 3, "warm": 1}


def test_cpu_without_clear_refs_falls_back_to_whole_process_maxrss(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_backend, "CLEAR_REFS", tmp_path / "missing" / "clear_refs")
    backend = cpu_backend.CpuBackend()
    backend.reset_peak_memory()
    peak = backend.peak_memory()
    assert peak.source.key == cpu_backend.MAXRSS_SOURCE and "not resettable" in peak.source.text
    assert peak.peak_rss_gib > 0 and peak.peak_memory_allocated_gib is None


def test_ranks_merge_to_the_max_of_each_peak_and_keep_each_rank():
    ranks = [
        {
            "peak_memory_allocated_gib": 3.0,
            "peak_memory_reserved_gib": 4.5,
            "peak_rss_gib": None,
            "memory_source": say("src_device_memory", kind="cuda", device="cuda:0").model_dump(),
        },
        {
            "peak_memory_allocated_gib": 3.5,
            "peak_memory_reserved_gib": 4.0,
            "peak_rss_gib": None,
            "memory_source": say("src_device_memory", kind="cuda", device="cuda:1").model_dump(),
        },
    ]
    out = efficiency.memory_fields(ranks, say("memory_window_steps", first=6, last=10, warm=5))
    assert (out["peak_memory_allocated_gib"], out["peak_memory_reserved_gib"]) == (3.5, 4.5)
    assert out["peak_rss_gib"] is None
    # the ranks' two sources as one message of two clauses; one source where they agree
    assert out["memory_source"].key == "clauses"
    assert out["memory_source"].text.endswith(
        "of cuda:0 after torch.cuda.reset_peak_memory_stats; "
        "torch.cuda.max_memory_allocated / max_memory_reserved of cuda:1 after "
        "torch.cuda.reset_peak_memory_stats"
    )
    same = efficiency.memory_fields([ranks[0], ranks[0]], out["memory_window"])
    assert same["memory_source"].key == "src_device_memory"
    assert [r["rank"] for r in out["memory_per_rank"]] == [0, 1]
    assert out["memory_per_rank"][1]["peak_memory_reserved_gib"] == 4.0


def test_training_efficiency_is_per_device_and_mfu_needs_a_peak():
    config = json.loads((TINY / "config.json").read_text())
    per_token = flops.training_flops_per_token(flops.TransformerShape.from_config(config), 128)
    # 2 ranks, 4096 tokens in 2 s: 1024 tokens/s per device
    out = efficiency.training_efficiency(
        config, 128, 4096, 2.0, 2, peak_tflops=None, device_name="x86_64", dtype="float32"
    )
    assert out["flops_per_token"] == per_token
    assert out["tflops_per_device"] == pytest.approx(1024 * per_token / 1e12)
    assert out["mfu_pct"] is None and out["peak_tflops"] is None
    mine = efficiency.training_efficiency(
        config, 128, 4096, 2.0, 2, peak_tflops=0.5, device_name="x86_64", dtype="float32"
    )
    assert mine["mfu_pct"] == pytest.approx(100 * 1024 * per_token / 1e12 / 0.5)


def test_an_unreadable_model_config_gives_na_with_the_reason_not_a_failed_run():
    config = {"model_type": "llama", "hidden_size": 8}
    out = efficiency.training_efficiency(
        config, 128, 4096, 2.0, 1, peak_tflops=None, device_name="x86_64", dtype="float32"
    )
    assert out["flops_per_token"] is None and out["mfu_pct"] is None
    source = Message.model_validate(out["tflops_source"])
    assert source.text.startswith("n/a: model config.json: missing num_hidden_layers")
    kv = efficiency.kv_cache_fields(config, [(10, 1)], 4, "float32")
    assert kv["kv_cache_gib"] is None and "missing num_hidden_layers" in kv["kv_cache_source"].text


def test_kv_cache_is_that_of_the_largest_batch():
    config = json.loads((TINY / "config.json").read_text())  # 4 layers, 2 KV heads of 64
    out = efficiency.kv_cache_fields(config, [(100, 2), (120, 1)], 28, "float32")
    # (100 + 28) x 2 sequences beats (120 + 28) x 1: 2 x 4 x 2 x 64 x 128 x 2 x 4 bytes
    assert (out["kv_cache_tokens"], out["kv_cache_batch"]) == (128, 2)
    assert out["kv_cache_gib"] * GIB == 2 * 4 * 2 * 64 * 128 * 2 * 4


def make_spec(tmp_path: Path, scheduler: dict) -> RunSpec:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = RunConfig.model_validate(
        {
            "model": {"name": "qwen3_tiny", "path": str(TINY)},
            "data": {"name": "wordle_sample", "path": str(DATA), "max_samples": 8},
            "scheduler": scheduler,
            "backend": {"name": "cpu"},
        }
    )
    return RunSpec(
        run_id="v-train-r1",
        index=1,
        variant="v",
        phase="train",
        repeat=1,
        config=config,
        config_hash="0" * 64,
        run_dir=str(run_dir),
        timeout_s=600,
        kill_grace_s=2,
    )


@linux_only
def test_cpu_sft_run_records_peak_rss_flops_and_no_mfu(tmp_path):
    from afbench.engines.sft import run_sft

    spec = make_spec(
        tmp_path,
        {
            "workload": "sft",
            "steps": 3,
            "seq_len": 64,
            "global_batch_size": 2,
            "micro_batch_size": 2,
            "measure": {"first_step": 2, "last_step": 3},
        },
    )
    result = run_sft(spec, cpu_backend.CpuBackend(), Path(spec.run_dir))
    assert result.memory.peak_rss_gib > 0
    assert result.memory.source.key == cpu_backend.HWM_SOURCE
    assert result.memory.window.text == "steps 2-3 (counters reset after 1 warm-up steps)"
    assert [r.rank for r in result.memory.per_rank] == [0]
    config = json.loads((TINY / "config.json").read_text())
    assert result.efficiency.flops_per_token == flops.training_flops_per_token(
        flops.TransformerShape.from_config(config), 64
    )
    steps = [r for r in read_records(Path(spec.run_dir) / "metrics.jsonl") if r["kind"] == "step"]
    window_s = sum(r["step_time_s"] for r in steps if r["step"] >= 2)
    assert result.efficiency.tflops_per_device == pytest.approx(
        2 * 128 / window_s * result.efficiency.flops_per_token / 1e12
    )
    assert result.efficiency.mfu_pct is None and result.efficiency.peak_source.text.startswith(
        "n/a"
    )


def test_cpu_infer_run_records_kv_cache_and_peak_rss(tmp_path):
    from afbench.engines.infer import run_infer

    spec = make_spec(
        tmp_path,
        {
            "workload": "infer",
            "max_new_tokens": 4,
            "num_prompts": 2,
            "batch_size": 2,
            "warmup_runs": 1,
            "measured_runs": 1,
        },
    )
    result = run_infer(spec, cpu_backend.CpuBackend(), Path(spec.run_dir))
    assert result.memory.peak_rss_gib > 0
    assert result.memory.window.text == "runs 2-2 (counters reset after 1 warm-up runs)"
    assert result.memory.kv_cache_batch == 2
    prompt = result.memory.kv_cache_tokens - 4
    assert 0 < prompt <= 256  # input_truncated_len
    assert result.memory.kv_cache_gib * GIB == 2 * 4 * 2 * 64 * (prompt + 4) * 2 * 4
