"""Report sentences as catalog messages (afbench.messages, issue 23 item 5, issue 32 item 4):
every sentence code decides on comes from labels.yaml in English and Chinese, numbers worded
there; what a run records (memory and TFLOPs sources, switch details, skip and contention
reasons) is a message too, so a report words it in its own language; a plain string an older
run recorded is shown as written."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest
import yaml

from afbench.messages import AS_WRITTEN, Message, as_written, fill, labels, render, say

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


#: A catalog key named in source: ``say("key"``, analysis's ``said("key"``, or a constant that
#: names one (``HWM_SOURCE = "src_vmhwm"``, ``INTERRUPTED_REASON = "skip_interrupted"``).
KEY_IN_SOURCE = re.compile(
    r'\b(?:say|said)\(\s*"([a-z0-9_]+)"' + r'|^[A-Z_]+(?:_SOURCE|_REASON) = "([a-z0-9_]+)"', re.M
)
#: Keys built in code, each from its template (``say(f"memory_window_{unit}", ...)``), and
#: the judge's reason codes (``say(code, **values)``: afbench.analysis.contention.judge).
BUILT_KEYS = {
    "memory_window_steps",
    "memory_window_runs",
    "switch_profiler_steps",
    "switch_profiler_runs",
    "cont_reason_short",
    "cont_reason_wait",
    "cont_reason_steal",
    "cont_reason_pressure",
    "cont_reason_cpu_share",
}


def test_every_key_the_code_says_is_in_the_english_and_the_chinese_catalog():
    en, zh = labels("en"), labels("zh")
    found = set()
    for path in SRC.rglob("*.py"):
        for said, named in KEY_IN_SOURCE.findall(path.read_text(encoding="utf-8")):
            found.add(said or named)
    # the writers of what a run records are among them (the scan is not empty by accident)
    assert {"src_vmhwm", "src_titan_memory", "skip_baseline_failed", "switch_rmsnorm"} <= found
    assert {"skip_interrupted", "run_replaced_contended", "src_not_reported"} <= found
    missing = sorted(k for k in found | BUILT_KEYS if k not in en or k not in zh)
    assert missing == [], f"said in src/afbench but not in labels.yaml en and zh: {missing}"


def test_the_judges_codes_are_the_built_keys():
    from afbench.analysis import contention as C

    src = (SRC / "analysis" / "contention.py").read_text()
    assert set(re.findall(r'"(cont_reason_[a-z_]+)"', src)) == {
        k for k in BUILT_KEYS if k.startswith("cont_reason_")
    }
    assert C.judge({"wall_s": 0.01})[1][0][0] == "cont_reason_short"


def writers() -> list[tuple[Message | dict, str, str]]:
    """(what each writer records today, its key, the English an earlier afbench recorded)."""
    from afbench.analysis.efficiency import not_reported, titan_efficiency, training_efficiency
    from afbench.analysis.flops import resolve_peak_tflops
    from afbench.backends.base import Backend, device_peak_memory
    from afbench.config.models import StepWindow
    from afbench.engines.efficiency import MeasuredWindow, kv_cache_fields
    from afbench.switches.profiler import detail

    class Device:
        def max_memory_allocated(self, index):
            return 0

        max_memory_reserved = max_memory_allocated

    window = StepWindow(first_step=6, last_step=10)
    llama = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 100,
    }
    trained = training_efficiency(
        llama, 128, 1000, 1.0, 1, peak_tflops=None, device_name="x86_64", dtype="float32"
    )
    titan = titan_efficiency([{"step": 6, "memory_gib": 1.0, "tflops": 2.0}], 6, 10)
    return [
        (
            device_peak_memory(Device(), "cuda", 0).source,
            "src_device_memory",
            "torch.cuda.max_memory_allocated / max_memory_reserved of cuda:0 after "
            "torch.cuda.reset_peak_memory_stats",
        ),
        (Backend().peak_memory().source, "src_not_measured", "not measured on backend base"),
        (
            not_reported("command")["memory_source"],
            "src_not_reported",
            "not reported (engine command)",
        ),
        (
            titan["memory_source"],
            "src_titan_memory",
            "torchtitan step log 'memory: X GiB(Y%)': reserved_bytes.all.peak of rank 0's "
            "device, reset after each logged step; max over the window",
        ),
        (
            titan["tflops_source"],
            "src_titan_tflops",
            "torchtitan step log 'tflops:' / 'mfu:' (its own FLOP count and peak); mean over "
            "the window",
        ),
        (
            trained["tflops_source"],
            "src_tflops_other_model",
            "afbench: 6N + 12*L*H*Q*T FLOPs per token (PaLM App. B, as torchtitan) x measured "
            "tokens/s per device over the window (parameters counted as Qwen3's; model_type is "
            "llama)",
        ),
        (
            resolve_peak_tflops(None, "x86_64", "float32")[1],
            "peak_unknown_device",
            "n/a: no published peak for device 'x86_64'; set backend.peak_tflops",
        ),
        (
            resolve_peak_tflops(None, "NVIDIA H100 SXM", "float32")[1],
            "peak_other_dtype",
            "n/a: model dtype float32, the published peak of 'NVIDIA H100 SXM' is BF16 dense; "
            "set backend.peak_tflops for this precision",
        ),
        (
            MeasuredWindow(None, window, None, None).label,
            "memory_window_steps",
            "steps 6-10 (counters reset after 5 warm-up steps)",
        ),
        (
            MeasuredWindow(None, window, None, None, unit="runs").label,
            "memory_window_runs",
            "runs 6-10 (counters reset after 5 warm-up runs)",
        ),
        (
            kv_cache_fields(llama, [(8, 2)], 4, "float32")["kv_cache_source"],
            "src_kv_cache",
            "2 (K, V) x layers x kv_heads x head_dim x (longest prompt + max_new_tokens) x "
            "batch x dtype bytes, from config.json",
        ),
        (
            detail("CpuBackend", "steps", window),
            "switch_profiler_steps",
            "CpuBackend profiler, steps 6-10",
        ),
    ]


def test_what_a_run_records_is_a_message_in_its_writers_english_and_in_chinese():
    en, zh = labels("en"), labels("zh")
    for recorded, key, english in writers():
        message = Message.model_validate(recorded)  # analysis records plain {key, args}
        assert message.key == key
        assert message.text == english, key  # the English of result.json is unchanged
        assert render(message, en) == english
        assert re.search(r"[\u4e00-\u9fff]", render(message, zh)), key


def test_skip_reasons_are_messages_naming_the_rule(compose_cfg, tmp_path):
    from afbench.config import validate_config
    from afbench.plan import make_plan, skip_reason

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
        assert reason.key == key and next(iter(st)) == reason.args["run"], reason
        assert f"skip_policy {policy}" in render(reason, zh) or key == "skip_baseline_failed"
        assert "did not succeed" in reason.text and "未成功" in render(reason, zh)


def test_a_string_an_older_run_recorded_is_shown_as_written_in_every_language():
    zh = labels("zh")
    # a plain string (summary.json before messages) and its upgrade (schema 5): as written
    old = "interrupted (SIGINT/SIGTERM to afbench)"
    assert render(old, zh) == old and render(as_written(old), zh) == old
    assert as_written(old).key == AS_WRITTEN and as_written(old).text == old
    assert render("RunFailed: exit 3; see stdout.log", zh) == "RunFailed: exit 3; see stdout.log"
    # the same reason recorded today is a message, worded in the report's language
    assert render(say("skip_interrupted"), zh).startswith("已中断")
    assert say("skip_interrupted").text == old


def test_a_new_runs_zh_report_words_its_recorded_notes_in_chinese(tmp_path):
    """issue 32 item 4: a command-engine experiment with report.lang=zh whose variant fails
    its first phase: its later run is skipped (a skip reason), the baseline's memory source
    is the command engine's ``not reported``; both in Chinese in report.md, and the runner's
    own error kept as written. (A contention reason: tests/test_contention_runs.py,
    test_contention_reasons_are_worded_by_the_reports_language.)"""
    from test_faults import afbench, command, output_dir

    recipes = tmp_path / "recipes"
    recipes.mkdir()
    recipe = {
        "scheduler": {"steps": 6, "measure": {"first_step": 3, "last_step": 6}},
        "experiment": {
            "name": "zh_notes",
            "baseline": "good",
            "variants": {"good": command("good.py", "{steps}"), "bad": command("exit3.py")},
            "phases": {"train": {}, "again": {}},
            "skip_policy": "per_variant",
        },
        "report": {"lang": "zh", "formats": ["md"]},
    }
    (recipes / "zh_notes.yaml").write_text(
        "# @package _global_\n" + yaml.safe_dump(recipe, sort_keys=False)
    )
    proc = afbench(tmp_path, "experiment=zh_notes", "launcher.timeout_s=60")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = output_dir(tmp_path)
    status = json.loads((out / "runs" / "bad-again-r1" / "status.json").read_text())
    assert status["reason"]["key"] == "skip_earlier_own_variant"  # recorded as a code
    report = (out / "report.md").read_text()
    assert "本变体之前的运行 bad-train-r1 未成功" in report  # the skip reason
    assert "did not succeed" not in report
    assert "未报告（引擎 command）" in report  # the memory source
    assert "not reported (engine command)" not in report
    assert "RunFailed: command exited with status 3" in report  # an error: as written
