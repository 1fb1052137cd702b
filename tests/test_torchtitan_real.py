"""The torchtitan engine against the real torchtitan: afbench's config function builds the model
of ``model.path`` (its weights load, its logits match transformers), preflight parses every
planned command line with torchtitan's own ConfigManager and names the known version gaps, and
``experiment=sft_af_compare engine=torchtitan`` trains the real trainer OFF and ON on this CPU
through afbench's CPU entry (torchtitan on CPU: SDPA attention, inductor C++) to a verdict.

The checks that import torchtitan skip without it (``pip install -e ".[titan-test]"``:
torchtitan 0.3.0 and triton, installed by .ci/run); the rest runs everywhere."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from afbench.config import validate_config
from afbench.engines.torchtitan.cmdline import CPU_ENTRY, CPU_LABEL, build_command
from afbench.engines.torchtitan.hf_model import qwen3_dims
from afbench.engines.torchtitan.probe import (
    device_check,
    fsdp_check,
    probe_request,
    set_timeout_check,
    titan_preflight,
)
from afbench.errors import ConfigError
from afbench.plan import make_plan

TINY = Path(__file__).resolve().parents[1] / "assets" / "qwen3_tiny"
HAVE_TITAN = all(importlib.util.find_spec(m) for m in ("torchtitan", "triton"))
needs_titan = pytest.mark.skipif(
    not HAVE_TITAN, reason="torchtitan and triton not installed (pip install -e '.[titan-test]')"
)

TINY_CONFIG = json.loads((TINY / "config.json").read_text())


def write_model(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TINY_CONFIG, **changes}))
    return folder


# --- the model torchtitan builds (pure) --------------------------------------------------------


def test_shipped_tiny_model_maps_to_torchtitans_qwen3_sizes():
    assert qwen3_dims(TINY) == {
        "dim": 256,
        "n_layers": 4,
        "n_heads": 4,
        "n_kv_heads": 2,
        "head_dim": 64,
        "hidden_dim": 768,
        "vocab_size": 2400,
        "max_seq_len": 2048,
        "rope_theta": 1e6,
        "enable_weight_tying": True,
    }


@pytest.mark.parametrize(
    "changes, said",
    [
        (
            {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"]},
            "not a dense Qwen3",
        ),
        ({"attention_bias": True}, "attention_bias is true"),
        ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads 3"),
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps 1e-05"),
        ({"intermediate_size": None}, "no integer intermediate_size"),
    ],
)
def test_a_model_torchtitan_cannot_build_is_a_plan_time_error_naming_model_path(
    compose_cfg, tmp_path, changes, said
):
    model = write_model(tmp_path / "model", **changes)
    cfg = validate_config(
        compose_cfg(
            "engine=torchtitan", "backend=cuda", f"model.path={model}", "model.manifest=null"
        )
    )
    with pytest.raises(ConfigError, match="model.path") as err:
        make_plan(cfg, tmp_path / "out")
    assert said in str(err.value) and str(model / "config.json") in str(err.value)


def test_command_line_tells_the_config_function_the_run_paths(compose_cfg, tmp_path):
    cfg = validate_config(compose_cfg("engine=torchtitan", "backend=cuda"))
    spec = make_plan(cfg, tmp_path / "out").runs[0]
    argv, env = build_command(spec, cfg.engine, "python")
    assert argv[argv.index("--module") + 1 : argv.index("--config") + 2] == [
        "afbench.engines.torchtitan.qwen3",
        "--config",
        "qwen3_from_hf",
    ]
    assert env["AFBENCH_MODEL_PATH"] == cfg.model.path == argv[argv.index("--hf_assets_path") + 1]
    assert env["AFBENCH_DATA_PATH"] == cfg.data.path


# --- version gaps (pure) -----------------------------------------------------------------------


def test_set_timeout_gap_names_both_versions_only_when_torchtitan_calls_it():
    gap = set_timeout_check(False, True, "2.13.0+cpu", "0.3.0")
    assert not gap["ok"] and "missing in torch 2.13.0+cpu" in gap["current"]
    assert "torchtitan 0.3.0 calls it" in gap["current"] and gap["action"]
    assert set_timeout_check(True, True, "2.14.0.dev20260601", "0.3.0")["ok"]
    assert set_timeout_check(False, False, "2.13.0", "0.2.2") is None
    # every run through afbench's CPU entry: its stand-in covers the gap
    covered = set_timeout_check(False, True, "2.13.0+cpu", "0.3.0", cpu_entry=True)
    assert covered["ok"] and CPU_ENTRY in covered["current"]


def test_cpu_passes_only_through_afbenchs_cpu_entry_and_a_matching_device_passes():
    cpu = device_check("cpu", "cuda", "0.3.0", CPU_ENTRY)
    assert cpu["ok"] and CPU_LABEL in cpu["current"]
    for entry in ("torchtitan.train", "torchtitan_npu.entry"):
        other = device_check("cpu", "cuda", "0.3.0", entry)
        assert not other["ok"] and "no CPU device" in other["current"]
        assert "'cuda'" in other["current"] and entry in other["current"]
    assert device_check("cuda", "cuda", "0.3.0", "torchtitan.train")["ok"]
    assert not device_check("npu", "cuda", "0.3.0", "torchtitan_npu.entry")["ok"]


@pytest.mark.parametrize(
    "world, backend, shard, torch_v, fails",
    [
        (2, "spmd_types", -1, "2.13.0+cu130", True),
        (2, "partial_dtensor", -1, "2.13.0+cu130", False),
        (1, "spmd_types", -1, "2.13.0+cu130", False),
        (2, "spmd_types", 1, "2.13.0+cu130", False),  # pure replication: no FSDP
        (2, "spmd_types", -1, "2.14.0.dev20260601+cu130", False),  # the nightly it is tested with
    ],
)
def test_fsdp_under_spmd_types_fails_only_at_world_size_above_one_on_a_release(
    world, backend, shard, torch_v, fails
):
    check = fsdp_check("r1", world, backend, shard, torch_v, "0.3.0")
    assert (check is not None) == fails
    if fails:
        assert "partial_dtensor" in check["action"] and torch_v in check["current"]


def test_preflight_without_torchtitan_is_one_failed_check_with_the_install(
    compose_cfg, tmp_path, hide_torchtitan
):
    cfg = validate_config(compose_cfg("engine=torchtitan", "backend=cuda"))
    checks = titan_preflight(make_plan(cfg, tmp_path / "out").runs)
    assert [(c["item"], c["ok"]) for c in checks] == [("torchtitan", False)]
    assert "not installed" in checks[0]["current"] and ".[titan]" in checks[0]["action"]


# --- the real torchtitan -----------------------------------------------------------------------


@needs_titan
def test_torchtitan_builds_the_shipped_model_that_its_weights_fit():
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from afbench.engines.torchtitan.qwen3 import qwen3_model_spec

    spec = qwen3_model_spec(str(TINY))
    model = spec.model.build()
    adapter = spec.state_dict_adapter(spec.model, str(TINY))
    weights = adapter.from_hf(load_file(TINY / "model.safetensors"))
    assert set(weights) == set(model.state_dict())
    model.load_state_dict(weights, strict=True)  # raises on a missing key or a wrong shape
    ids = torch.tensor([[5, 17, 99, 300, 1200, 7, 8, 9]])
    positions = torch.arange(ids.shape[1])[None]
    with torch.no_grad():
        titan = model.eval()(
            ids, positions=positions, attention_masks=model.get_attention_masks(positions)
        )
        hf = AutoModelForCausalLM.from_pretrained(TINY).eval()(ids).logits
    assert titan.shape == hf.shape == (1, 8, 2400)
    assert torch.allclose(titan, hf, atol=1e-4)


#: The published config.json sizes of the Qwen3 presets (Qwen/Qwen3-*; conf/model/*.yaml).
PRESETS = {
    "0.6B": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        tie_word_embeddings=True,
    ),
    "1.7B": dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        tie_word_embeddings=True,
    ),
    "8B": dict(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        tie_word_embeddings=False,
    ),
}


@needs_titan
@pytest.mark.parametrize("flavor", sorted(PRESETS))
def test_preset_config_json_builds_torchtitans_own_qwen3_preset(tmp_path, flavor):
    import torch
    from torchtitan.models.qwen3 import model_registry

    from afbench.engines.torchtitan.qwen3 import qwen3_model_spec

    folder = write_model(
        tmp_path / flavor,
        **PRESETS[flavor],
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rope_parameters=None,
    )
    ours, theirs = qwen3_model_spec(str(folder)).model, model_registry(flavor).model
    with torch.device("meta"):
        shapes = [
            {k: v.shape for k, v in cfg.build().state_dict().items()} for cfg in (ours, theirs)
        ]
    assert shapes[0] == shapes[1]
    assert ours.enable_weight_tying == theirs.enable_weight_tying


@needs_titan
def test_multi_turn_chat_rows_become_the_single_turn_pair_torchtitans_chat_dataset_takes():
    from afbench.engines.torchtitan.qwen3 import single_turn

    row = {
        "prompt": [
            {"role": "system", "content": "Play Wordle."},
            {"role": "user", "content": "Guess."},
        ],
        "completion": [
            {"role": "assistant", "content": "<guess>[crate]</guess>"},
            {"role": "user", "content": "G X X X Y"},
            {"role": "assistant", "content": "<guess>[cells]</guess>"},
        ],
    }
    user, assistant = single_turn(row)
    assert assistant == {"role": "assistant", "content": "<guess>[cells]</guess>"}
    assert user["role"] == "user" and user["content"] == (
        "system: Play Wordle.\n\nuser: Guess.\n\nassistant: <guess>[crate]</guess>"
        "\n\nuser: G X X X Y"
    )
    pair = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert single_turn({"messages": pair}) == pair
    with pytest.raises(ValueError, match="without an assistant"):
        single_turn({"messages": pair[:1]})


@needs_titan
def test_torchtitan_configmanager_accepts_every_sft_af_compare_command_line(compose_cfg, tmp_path):
    from afbench.engines.torchtitan.probe import probe

    cfg = validate_config(
        compose_cfg(
            "experiment=sft_af_compare",
            "engine=torchtitan",
            "backend=cuda",
            "parallel.world_size=2",
            "scheduler.micro_batch_size=2",
        )
    )
    runs = make_plan(cfg, tmp_path / "out").runs
    checks = {c["item"]: c for c in probe(probe_request(runs))}
    for run in runs:
        line = checks[f"torchtitan command line {run.run_id}"]
        assert line["ok"], line
        assert "model qwen3/hf:qwen3_tiny" in line["current"]
    import torch

    if "dev" not in torch.__version__:  # a release torch: FSDP under spmd_types is flagged
        assert not checks[f"torchtitan FSDP {runs[0].run_id}"]["ok"]


@needs_titan
def test_torchtitan_rejects_an_unknown_option_as_a_failed_line(compose_cfg, tmp_path):
    from afbench.engines.torchtitan.probe import probe

    cfg = validate_config(
        compose_cfg(
            "engine=torchtitan", "backend=cuda", "engine.extra_args=[--training.no_such_option,'1']"
        )
    )
    [run] = make_plan(cfg, tmp_path / "out").runs
    check = next(c for c in probe(probe_request([run])) if "command line" in c["item"])
    assert not check["ok"] and "rejected by torchtitan" in check["current"]
    assert "no_such_option" in check["current"]


@needs_titan
@pytest.mark.e2e
def test_task_check_on_cpu_under_torchtitans_own_entry_names_every_blocker_and_exits_3(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "task=check",
            "engine=torchtitan",
            "engine.flavor=torchtitan",
            "+engine.entry=torchtitan.train",
            "backend=cpu",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "Traceback" not in out
    assert "[PASS] torchtitan command line baseline-run-r1: current accepted" in out
    assert "[FAIL] torchtitan device: current planned backend cpu" in out
    import torch

    if not hasattr(torch.distributed, "set_timeout"):
        assert "[FAIL] torch.distributed.set_timeout: current missing" in out


#: A short sft_af_compare on CPU: one round of the train phase (no profile phase), 5 steps of one
#: 256-token sequence (the recipe's; torchtitan's chat dataset drops rows longer than seq_len and
#: the shipped Wordle rows are 173-393 tokens), no reruns (conftest sets no wait for quiet).
SHORT_TITAN = (
    "experiment=sft_af_compare",
    "engine=torchtitan",
    "experiment.steps=5",
    "verdict.rounds=1",
    "~experiment.phases.profile",
    "scheduler.global_batch_size=1",
    "scheduler.micro_batch_size=1",
    "experiment.rerun_contended=0",
)


@needs_titan
@pytest.mark.e2e
def test_sft_af_compare_trains_real_torchtitan_off_and_on_on_cpu_to_a_verdict(
    tmp_path, afbench_env
):
    proc = subprocess.run(
        [sys.executable, "-m", "afbench", *SHORT_TITAN],
        cwd=tmp_path,
        env=afbench_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    [summary_path] = (tmp_path / "outputs").rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["environment"]["device"] == CPU_LABEL
    [comparison] = summary["comparisons"]
    assert comparison["speed"]["decision"] and comparison["verdict_line"]
    assert summary["headline"] and all(line in out for line in summary["headline"])
    for run in ("af_off-train-r1", "af_on-train-r1"):
        run_dir = summary_path.parent / "runs" / run
        console = (run_dir / "titan" / "console.log").read_text()
        titan_losses = [
            float(m)
            for m in re.findall(r"\[titan\][^\n]*\bstep:\s*\d+\s+loss:\s*([\d.]+)", console)
        ]
        steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
        # torchtitan's own loss per step, of afbench's shipped (trained) weights: not log(2400)
        assert [s["loss"] for s in steps] == pytest.approx(titan_losses, abs=1e-5)
        assert all(0 < loss < 4 for loss in titan_losses)
        result = json.loads((run_dir / "result.json").read_text())
        assert result["step_time_source"] == "structured_logs"
        assert result["argv"][result["argv"].index("--module") - 1] == CPU_ENTRY
        assert ("--compile.enable" in result["argv"]) == (run == "af_on-train-r1")


@needs_titan
def test_a_model_folder_without_config_json_fails_the_config_function_line(compose_cfg, tmp_path):
    from afbench.engines.torchtitan.probe import probe

    (tmp_path / "empty_model").mkdir()
    cfg = validate_config(
        compose_cfg(
            "engine=torchtitan",
            "backend=cuda",
            f"model.path={tmp_path / 'empty_model'}",
            "model.manifest=null",
        )
    )
    [run] = make_plan(cfg, tmp_path / "out").runs  # no config.json: left to preflight
    check = next(c for c in probe(probe_request([run])) if "command line" in c["item"])
    assert not check["ok"] and check["current"].startswith("config function failed: model.path")
    assert "model.path" in check["action"]


def _packed(doc: int, length: int = 64):
    """positions (1, length) of two packed documents, the first ``doc`` tokens long."""
    import torch

    return torch.cat([torch.arange(doc), torch.arange(length - doc)])[None]


@needs_titan
def test_cpu_attention_is_flexattentions_and_compiled_blocks_compile_once(monkeypatch):
    """Patch 3 of afbench's CPU entry: SDPA on the BlockMask's dense mask gives torchtitan's
    FlexAttention logits, and the compiled blocks are not compiled again for a new batch (a
    mask cache keyed by id(block_mask) inside the block recompiled every step, until dynamo's
    recompile limit)."""
    import torch
    from torch._dynamo.testing import CompileCounter
    from torchtitan.models.common.attention import FlexAttention
    from torchtitan.models.common.decoder import Decoder

    from afbench.engines.torchtitan import cpu_entry
    from afbench.engines.torchtitan.qwen3 import qwen3_model_spec

    torch.manual_seed(0)
    model = qwen3_model_spec(str(TINY)).model.build()
    ids = torch.randint(0, 2400, (1, 64))
    positions = _packed(40)
    with torch.no_grad():
        flex = model(ids, positions=positions, attention_masks=model.get_attention_masks(positions))
    monkeypatch.setattr(
        Decoder, "get_attention_masks", cpu_entry.with_dense_mask(Decoder.get_attention_masks)
    )
    monkeypatch.setattr(FlexAttention, "compiled_flex_attn", staticmethod(cpu_entry.masked_sdpa))
    torch._dynamo.reset()
    counter = CompileCounter()
    for block in model.layers.children():
        block.compile(backend=counter, fullgraph=True)
    compiled = []
    for doc in (40, 10, 63):  # three batches, their documents split differently
        positions = _packed(doc)
        out = model(ids, positions=positions, attention_masks=model.get_attention_masks(positions))
        out.float().mean().backward()
        compiled.append(counter.frame_count)
        if doc == 40:
            assert torch.allclose(out.detach(), flex, atol=1e-5)
    torch._dynamo.reset()
    assert compiled[0] > 0 and compiled == [compiled[0]] * 3
