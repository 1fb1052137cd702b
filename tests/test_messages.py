"""Report sentences as catalog messages (afbench.messages, issue 23 item 5): every sentence
code decides on comes from labels.yaml in English and Chinese, numbers worded there; what a
run recorded in English is recognised and shown in the report's language."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from afbench.messages import RECORDED, Message, fill, labels, recorded, render, say

SRC = Path(__file__).resolve().parents[1] / "src" / "afbench"


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_sentence_has_the_same_fields_in_english_and_chinese():
    en, zh = labels("en"), labels("zh")
    assert set(zh) >= set(en) - {"caveat_text"}  # caveat_text: the lead's, zh only today
    for key, text in en.items():
        assert fields(zh[key]) == fields(text), key


def test_a_message_carries_numbers_and_is_worded_per_language():
    m = say(
        "caveat_memory",
        measure="rss",
        delta_pct=10.08,
        delta_gib=0.126,
        baseline="plain",
        warn_pct=10.0,
    )
    assert m.args["delta_pct"] == 10.08  # a number, not a formatted string
    assert m.text == (
        "peak memory (rss) +10.1% (+0.126 GiB) over plain, above report.memory_warn_pct 10%"
    )
    zh = render(m.model_dump(), labels("zh"))
    assert "+10.1%" in zh and "峰值内存" in zh and "peak memory" not in zh
    # as summary.json stores it (a dict), and nested: the sides named in the language
    nested = say("profiling_run_failed", side=say("variant"), detail="")
    assert render(nested.model_dump(), labels("zh")) == "变体的 profile 运行失败"
    joined = say(
        "clauses", items=[nested, say("profiling_no_dir", side=say("baseline"), detail="")]
    )
    assert joined.text == "variant profile run failed; baseline has no profile directory"
    assert render(joined, labels("zh")) == "变体的 profile 运行失败；基线没有 profile 目录"


def test_unknown_keys_and_missing_values_are_errors_and_an_unknown_stored_key_falls_back():
    with pytest.raises(KeyError, match="no_such_sentence"):
        say("no_such_sentence")
    with pytest.raises(KeyError):
        say("caveat_recompile", variant="x")  # no step
    assert render(Message(key="from_a_newer_afbench", text="as stored"), labels("zh")) == (
        "as stored"
    )
    assert fill("{n:+.1f}%", n=2.345) == "+2.3%"


def writers(tmp: Path) -> list[tuple[str, str]]:
    """(text, key) of every sentence a run records, produced by its writer today."""
    from afbench.analysis.efficiency import (
        TFLOPS_SOURCE,
        TITAN_MEMORY_SOURCE,
        TITAN_TFLOPS_SOURCE,
        _architecture_caveat,
        not_reported,
    )
    from afbench.analysis.flops import resolve_peak_tflops
    from afbench.backends.base import device_peak_memory
    from afbench.backends.cpu import HWM_SOURCE, MAXRSS_SOURCE, CpuBackend
    from afbench.config.models import StepWindow
    from afbench.engines.efficiency import KV_CACHE_SOURCE, MeasuredWindow
    from afbench.switches.profiler import detail

    class Device:
        def max_memory_allocated(self, index):
            return 0

        max_memory_reserved = max_memory_allocated

    window = StepWindow(first_step=6, last_step=10)
    return [
        (HWM_SOURCE, "src_vmhwm"),
        (MAXRSS_SOURCE, "src_maxrss"),
        (device_peak_memory(Device(), "cuda", 0).source, "src_device_memory"),
        (not_reported("command")["memory_source"], "src_not_reported"),
        (TITAN_MEMORY_SOURCE, "src_titan_memory"),
        (TFLOPS_SOURCE, "src_tflops"),
        (TFLOPS_SOURCE + _architecture_caveat({"model_type": "llama"}), "src_tflops_other_model"),
        (TITAN_TFLOPS_SOURCE, "src_titan_tflops"),
        (resolve_peak_tflops(None, "x86_64", "float32")[1], "peak_unknown_device"),
        (resolve_peak_tflops(None, "NVIDIA H100 SXM", "float32")[1], "peak_other_dtype"),
        (MeasuredWindow(None, window, None, None).label, "memory_window_steps"),
        (MeasuredWindow(None, window, None, None, unit="runs").label, "memory_window_runs"),
        (KV_CACHE_SOURCE, "src_kv_cache"),
        (detail(type(CpuBackend()).__name__, "steps", window), "switch_profiler_steps"),
        (detail(type(CpuBackend()).__name__, "runs", window), "switch_profiler_runs"),
    ]


def test_every_recorded_sentence_is_recognised_and_renders_back_to_itself_in_english(tmp_path):
    en, zh = labels("en"), labels("zh")
    for text, key in writers(tmp_path):
        found = recorded(text)
        assert found is not None and found.key == key, text
        assert render(text, en) == text  # the English report is unchanged
        assert render(text, zh) != text and re.search(r"[\u4e00-\u9fff]", render(text, zh)), key


def test_recorded_switch_details_are_the_converters_words():
    source = (SRC / "switches" / "converters.py").read_text()
    assert 'f"{len(layers)} sites: residual add + post_attention_layernorm -> {add_name}"' in source
    assert 'f"{sites} sites: RMSNorm -> {rms_name}"' in source
    zh = labels("zh")
    assert (
        render("4 sites: residual add + post_attention_layernorm -> afbench::add_rms_norm", zh)
        == "4 处：残差加法 + post_attention_layernorm -> afbench::add_rms_norm"
    )
    assert render("torch.compile(backend='inductor', mode=None)", zh) == (
        "torch.compile(backend='inductor', mode=None)"
    )  # code stays code


def test_recorded_skip_and_interrupt_reasons_are_the_launchers_words(compose_cfg, tmp_path):
    from afbench.config import validate_config
    from afbench.plan import make_plan, skip_reason

    # each rule of plan.skip_reason, as it writes its reason, is a catalog sentence
    zh = labels("zh")
    for policy, st, run_id, key in [
        ("per_variant", {"af_off-train-r1": "FAILED"}, "af_on-train-r1", "skip_baseline_failed"),
        (
            "per_variant",
            {"af_off-train-r1": "FAILED"},
            "af_off-profile-r1",
            "skip_earlier_baseline",
        ),
        (
            "per_variant",
            {"af_on-train-r1": "FAILED"},
            "af_on-profile-r1",
            "skip_earlier_own_variant",
        ),
        ("reference", {"af_on-train-r1": "FAILED"}, "af_off-profile-r1", "skip_earlier_reference"),
    ]:
        plan = make_plan(
            validate_config(
                compose_cfg("experiment=sft_af_compare", f"experiment.skip_policy={policy}")
            ),
            tmp_path,
        )
        reason = skip_reason(plan, next(r for r in plan.runs if r.run_id == run_id), st)
        found = recorded(reason)
        assert found is not None and found.key == key, reason
        assert render(reason, labels("en")) == reason
        assert f"skip_policy {policy}" in render(reason, zh) or key == "skip_baseline_failed"
    from afbench.runspec import INTERRUPTED  # the launcher's and experiment's interrupt reason

    assert INTERRUPTED == "interrupted (SIGINT/SIGTERM to afbench)"
    zh = labels("zh")
    assert render("earlier run a-train-r1 did not succeed", zh) == "之前的运行 a-train-r1 未成功"
    assert render("interrupted (SIGINT/SIGTERM to afbench)", zh).startswith("已中断")
    # any other recorded text (an error message) is shown as written
    assert render("RunFailed: command exited with status 3", zh) == (
        "RunFailed: command exited with status 3"
    )
    assert {key for _, key in RECORDED} <= set(labels("en"))
