"""The torchtitan engine up to the process boundary: command lines, log parsers, and the run
wrapper (against a stand-in torchtitan package, since torchtitan cannot run on a CPU machine)."""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import parse_step_times
from afbench.config import validate_config
from afbench.config.engines import TorchtitanEngine
from afbench.engines.torchtitan.cmdline import CPU_ENTRY, build_command, trainer_args
from afbench.engines.torchtitan.parsers import (
    find_titan_traces,
    parse_titan_log,
    step_records,
    step_time_from_tps,
    step_times_from_structured_logs,
)
from afbench.engines.torchtitan.run import run_torchtitan
from afbench.errors import ConfigError, RunFailed, RunSkipped
from afbench.plan import make_plan

FIXTURES = Path(__file__).parent / "fixtures" / "torchtitan"
MODEL = "/models/Qwen3-1.7B"
DATA = "/data/wordle/data/train-00000-of-00001.parquet"
NPU_OVERRIDES = (
    "experiment=sft_af_compare",
    "verdict.rounds=1",
    "backend=npu",
    "parallel.world_size=2",
    "parallel.devices=[0,1]",
    # GBS 4 on two devices: 2 per device, one micro batch (the reference's config function
    # has local_batch_size 2); the reference trains at sequence length 1024.
    "scheduler.micro_batch_size=2",
    "scheduler.seq_len=1024",
    "model=qwen3_1_7b",
    f"model.path={MODEL}",
    "data=wordle",
    f"data.path={DATA}",
)


def with_engine(spec, engine: TorchtitanEngine):
    """The RunSpec with its engine replaced (engine=torchtitan is not in the config union yet)."""
    return spec.model_copy(update={"config": spec.config.model_copy(update={"engine": engine})})


@pytest.fixture
def af_compare_runs(compose_cfg, tmp_path):
    """The four RunSpecs of sft_af_compare on two NPUs, in plan order."""
    cfg = validate_config(compose_cfg(*NPU_OVERRIDES))
    plan = make_plan(cfg, tmp_path / "out")
    assert [r.run_id for r in plan.runs] == [
        "af_off-train-r1",
        "af_on-train-r1",
        "af_off-profile-r1",
        "af_on-profile-r1",
    ]
    return plan.runs


# --- the engine's config ---------------------------------------------------------------------


def test_flavor_fills_module_and_config_when_left_out():
    npu = TorchtitanEngine(name="torchtitan", flavor="torchtitan_npu")
    assert (npu.module, npu.config) == ("torchtitan_npu.models.qwen3", "sft_qwen3_1_7b_wordle")
    assert npu.entry_module == "torchtitan_npu.entry"
    titan = TorchtitanEngine.model_validate({"name": "torchtitan", "module": None})
    assert (titan.module, titan.config) == ("afbench.engines.torchtitan.qwen3", "qwen3_from_hf")
    assert titan.entry_module == "torchtitan.train"
    own = TorchtitanEngine(flavor="torchtitan_npu", module="myproj.titan", config="mine")
    assert (own.module, own.config) == ("myproj.titan", "mine")


def test_unknown_engine_key_and_pattern_without_step_group_are_rejected():
    with pytest.raises(ValidationError, match="extra"):
        TorchtitanEngine.model_validate({"name": "torchtitan", "modul": "x"})
    with pytest.raises(ValidationError, match=r"\(\?P<step>"):
        TorchtitanEngine(log_pattern=r"loss: (\d+)")
    with pytest.raises(ValidationError, match="plain folder name"):
        TorchtitanEngine(dump_folder_name="../up")


# --- command lines against the reference ------------------------------------------------------


def reference_command(steps: int, seed: int, compiled: bool, profile_dir: str | None):
    """docs/reference.md §1's torchtitan-npu command, restated: (env, script argv)."""
    env = {"MODULE": "torchtitan_npu.models.qwen3", "CONFIG": "sft_qwen3_1_7b_wordle", "NGPU": "2"}
    argv = [
        "bash",
        "scripts/run_train.sh",
        "--hf_assets_path",
        MODEL,
        "--checkpoint.load_only",
        "--training.global_batch_size",
        "4",
        "--training.steps",
        str(steps),
        "--debug.seed",
        str(seed),
    ]
    if compiled:
        argv.append("--compile.enable")
    if profile_dir is not None:
        argv += [
            "--profiling.enable_profiling",
            "--profiling.profile_step_start",
            "6",
            "--profiling.profile_step_end",
            "11",
            "--profiling.save_traces_folder",
            profile_dir,
        ]
    argv += [
        "dataloader:chat-data-loader-config",
        "--dataloader.dataset-path",
        "parquet",
        "--dataloader.data-files",
        DATA,
    ]
    return env, argv


def split_options(args: list[str]) -> tuple[dict[str, str | bool], list[str], list[str]]:
    """(trainer options before the subcommand, the subcommand tokens, options after it).

    An option takes the next token as its value unless that token is another option or a
    subcommand; flags map to True. Duplicated options fail the test.
    """
    sub = next((i for i, a in enumerate(args) if ":" in a and not a.startswith("-")), len(args))
    opts: dict[str, str | bool] = {}
    i = 0
    while i < sub:
        key = args[i]
        assert key.startswith("--"), f"stray token {key!r}"
        assert key not in opts, f"{key} given twice"
        if i + 1 < sub and not args[i + 1].startswith("--"):
            opts[key] = args[i + 1]
            i += 2
        else:
            opts[key] = True
            i += 1
    return opts, args[sub : sub + 1], args[sub + 1 :]


def test_sft_af_compare_commands_match_the_reference_flag_by_flag(af_compare_runs):
    engine = TorchtitanEngine(
        flavor="torchtitan_npu", train_script="scripts/run_train.sh", workdir="/opt/torchtitan-npu"
    )
    expected = {  # run -> (steps, seed, compiled, profiled), docs/reference.md §1's table
        "af_off-train-r1": (10, 42, False, False),
        "af_on-train-r1": (10, 42, True, False),
        "af_off-profile-r1": (12, 43, False, True),
        "af_on-profile-r1": (12, 43, True, True),
    }
    for spec in af_compare_runs:
        steps, seed, compiled, profiled = expected[spec.run_id]
        profile_dir = str(Path(spec.run_dir) / "profile")
        ref_env, ref_argv = reference_command(
            steps, seed, compiled, profile_dir if profiled else None
        )
        argv, env = build_command(with_engine(spec, engine), engine, sys.executable)

        assert argv[:2] == ref_argv[:2] == ["bash", "scripts/run_train.sh"]
        for key, value in ref_env.items():
            assert env[key] == value, key
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"

        ours, our_sub, our_data = split_options(argv[2:])
        ref, ref_sub, ref_data = split_options(ref_argv[2:])
        for flag, value in ref.items():
            assert ours.get(flag) == value, (
                f"{spec.run_id}: {flag} is {ours.get(flag)!r}, reference {value!r}"
            )
        assert (our_sub, our_data) == (ref_sub, ref_data)
        # Profiling options in the reference's order, as one block.
        if profiled:
            block = ref_argv[ref_argv.index("--profiling.enable_profiling") :][:7]
            start = argv.index("--profiling.enable_profiling")
            assert argv[start : start + 7] == block
        else:
            assert not any(a.startswith(("--profiling.", "--profiler.")) for a in argv)
        # What afbench adds, and nothing else: explicit values the reference takes from its
        # config function, the HF weights as initial checkpoint, the dump folder, metrics.
        extras = {k: v for k, v in ours.items() if k not in ref}
        assert extras == {
            "--checkpoint.enable": True,
            "--checkpoint.initial_load_path": MODEL,
            "--checkpoint.initial_load_in_hf": True,
            "--training.seq_len": "1024",
            "--training.local_batch_size": "2",
            **({"--compile.backend": "inductor"} if compiled else {"--compile.no-enable": True}),
            "--dump_folder": str(Path(spec.run_dir) / "titan"),
            "--metrics.log_freq": "1",
            "--metrics.disable_color_printing": True,
        }, spec.run_id


def test_direct_npu_command_is_torchrun_of_the_npu_entry(af_compare_runs):
    engine = TorchtitanEngine(flavor="torchtitan_npu")
    spec = with_engine(af_compare_runs[1], engine)  # af_on-train-r1
    argv, env = build_command(spec, engine, "/venv/bin/python")
    dump = str(Path(spec.run_dir) / "titan")
    assert argv[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    assert "--nproc_per_node=2" in argv
    assert argv[argv.index("--local-ranks-filter") + 1] == "0"
    assert argv[argv.index("--log-dir") + 1] == f"{dump}/torchrun"
    m = argv.index("-m", 3)
    assert argv[m : m + 6] == [
        "-m",
        "torchtitan_npu.entry",
        "--module",
        "torchtitan_npu.models.qwen3",
        "--config",
        "sft_qwen3_1_7b_wordle",
    ]
    assert argv[m + 6 :] == trainer_args(spec, engine)
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert "MODULE" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert all(isinstance(a, str) for a in argv)


def test_torchtitan_flavor_records_the_window_with_a_one_shot_schedule(compose_cfg, tmp_path):
    cfg = validate_config(
        compose_cfg(
            "experiment=sft_af_compare",
            "verdict.rounds=1",
            "backend=cuda",
            "parallel.world_size=2",
            "parallel.devices=[2,3]",
            "scheduler.micro_batch_size=2",
        )
    )
    engine = TorchtitanEngine()
    spec = with_engine(make_plan(cfg, tmp_path).runs[3], engine)  # af_on-profile-r1
    argv, env = build_command(spec, engine, "python")
    opts, sub, _ = split_options(argv[argv.index("--config") + 2 :])
    # steps 6..10 with one warmup step: wait 4, warmup 1, active 5, once -> iteration_10/
    assert {k: v for k, v in opts.items() if k.startswith("--profiler.")} == {
        "--profiler.enable_profiling": True,
        "--profiler.save_traces_folder": str(Path(spec.run_dir) / "profile"),
        "--profiler.profile_freq": "10",
        "--profiler.profiler_warmup": "1",
        "--profiler.profiler_active": "5",
        "--profiler.profiler_repeat": "1",
    }
    assert opts["--compile.enable"] is True and opts["--training.steps"] == "12"
    assert sub == []  # upstream: the config function names the data
    assert argv[argv.index("-m", 3) + 1] == "torchtitan.train"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and "ASCEND_RT_VISIBLE_DEVICES" not in env


def test_devices_left_null_set_no_visibility_variable(compose_cfg, tmp_path):
    cfg = validate_config(compose_cfg("backend=cuda"))
    engine = TorchtitanEngine()
    spec = with_engine(make_plan(cfg, tmp_path).runs[0], engine)
    _, env = build_command(spec, engine, "python")
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_extra_args_come_before_the_dataloader_subcommand(af_compare_runs):
    engine = TorchtitanEngine(
        flavor="torchtitan_npu",
        extra_args=["--training.max_norm", "0.5"],
        data_args=["dataloader:chat-data-loader-config", "--dataloader.data-files", "{data_path}"],
    )
    argv, _ = build_command(with_engine(af_compare_runs[0], engine), engine, "python")
    assert argv[-5:] == [
        "--training.max_norm",
        "0.5",
        "dataloader:chat-data-loader-config",
        "--dataloader.data-files",
        DATA,
    ]


def test_a_relative_model_path_reaches_torchtitan_absolute(af_compare_runs, tmp_path, monkeypatch):
    # torchtitan requires an absolute checkpoint.initial_load_path: validation makes it so,
    # against the directory afbench was started in
    monkeypatch.chdir(tmp_path)
    spec = af_compare_runs[0]
    model = type(spec.config.model)(
        **{**spec.config.model.model_dump(), "path": "models/Qwen3-1.7B"}
    )
    spec = spec.model_copy(update={"config": spec.config.model_copy(update={"model": model})})
    args = trainer_args(spec, TorchtitanEngine(flavor="torchtitan_npu"))
    assert args[args.index("--hf_assets_path") + 1] == str(tmp_path / "models" / "Qwen3-1.7B")
    # without HF assets the config function names the weights, and the path is not used
    no_assets = trainer_args(spec, TorchtitanEngine(hf_assets=False))
    assert "--hf_assets_path" not in no_assets and "--checkpoint.enable" not in no_assets
    assert "--checkpoint.load_only" in no_assets


def test_builtin_only_switches_skip_the_run(af_compare_runs):
    spec = af_compare_runs[0]
    opt = spec.config.optimization.model_copy(update={"rmsnorm": True})
    spec = spec.model_copy(update={"config": spec.config.model_copy(update={"optimization": opt})})
    with pytest.raises(RunSkipped, match="optimization.rmsnorm"):
        trainer_args(spec, TorchtitanEngine())


def test_npu_profiler_window_starting_at_step_one_is_rejected(af_compare_runs):
    spec = af_compare_runs[2]
    window = spec.config.optimization.profiler_window.model_copy(
        update={"first_step": 1, "warmup_steps": 0}
    )
    opt = spec.config.optimization.model_copy(update={"profiler_window": window})
    spec = spec.model_copy(update={"config": spec.config.model_copy(update={"optimization": opt})})
    with pytest.raises(ConfigError, match="first_step"):
        trainer_args(spec, TorchtitanEngine(flavor="torchtitan_npu"))


# --- parsers ----------------------------------------------------------------------------------


def test_colored_log_gives_each_training_step_once_without_validation_lines():
    records = parse_titan_log((FIXTURES / "console_rank0_color.log").read_text(), world_size=2)
    assert [r["step"] for r in records] == list(range(1, 13))
    first, second = records[0], records[1]
    assert first["loss"] == 2.91234 and first["grad_norm"] == 14.2031
    assert (first["memory_gib"], first["memory_pct"]) == (38.27, 62.15)
    assert second["tps_per_device"] == 2246 and second["tokens_per_s"] == 4492
    assert second["tflops"] == 25.20 and second["mfu_pct"] == 7.12
    assert all(r["rank"] == 0 and r["step_time_s"] is None for r in records)
    # thousands separators in tps and tflops
    assert max(r["tps_per_device"] for r in records) > 3000


def test_mfu_na_and_nan_loss_are_kept_as_none_and_nan():
    line = (
        "[titan] 2026-09-21 10:15:06,000 - root - INFO - step:  3  loss:      nan  "
        "grad_norm:     nan  memory: 12.00GiB(20.00%)  tps: 1,234  tflops: 1,024.50  mfu: N/A"
    )
    (rec,) = parse_titan_log(line)
    assert math.isnan(rec["loss"]) and rec["mfu_pct"] is None
    assert rec["tflops"] == 1024.5 and rec["rank"] is None and rec["tokens_per_s"] == 1234


def test_npu_lines_carry_their_own_step_time_for_the_verdict_parser():
    text = (FIXTURES / "console_npu_color.log").read_text()
    records = parse_titan_log(text, world_size=2)
    assert [r["step_time_s"] for r in records][5:10] == [0.587, 0.592, 0.590, 0.595, 0.589]
    # the strict verdict parser reads these lines as they are
    assert parse_step_times(text, 6, 10) == {6: 0.587, 7: 0.592, 8: 0.590, 9: 0.595, 10: 0.589}


def test_structured_logs_give_rank0_step_spans_in_seconds():
    times = step_times_from_structured_logs(FIXTURES / "dump")
    assert list(times) == list(range(1, 13))
    assert times[6] == pytest.approx(0.583)
    assert step_times_from_structured_logs(FIXTURES / "dump", rank=1)[6] == pytest.approx(1.583)
    assert step_times_from_structured_logs(FIXTURES / "no-such-dump") == {}


def test_structured_logs_drop_failed_steps_and_reject_duplicates(tmp_path):
    folder = tmp_path / "structured_logs"
    folder.mkdir()
    rows = [
        {"step": 1, "log_type_name": "step_end", "value": 500.0},
        {"step": 2, "log_type_name": "step_error"},
        {"step": 2, "log_type_name": "step_end", "value": 20.0},
        {"step": 3, "log_type_name": "fwd_bwd_end", "value": 300.0},
    ]
    path = folder / "training.global_rank_0.20260921-101402-AAAAAA.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "log_ty')
    assert step_times_from_structured_logs(tmp_path) == {1: 0.5}
    with open(path, "a") as fh:
        fh.write("\n" + json.dumps({"step": 1, "log_type_name": "step_end", "value": 9.0}) + "\n")
    with pytest.raises(InvalidLog, match="step 1 has two step_end records"):
        step_times_from_structured_logs(tmp_path)


def test_step_time_from_tps_counts_every_device():
    # GBS 4 x seq 1024 on two devices at 3,472 tokens/s each
    assert step_time_from_tps(3472, 2, 4096) == pytest.approx(4096 / 6944)
    with pytest.raises(ValueError):
        step_time_from_tps(0, 2, 4096)


def test_step_records_prefer_own_time_then_structured_then_tps():
    parsed = parse_titan_log((FIXTURES / "console_rank0_color.log").read_text(), world_size=2)
    structured = step_times_from_structured_logs(FIXTURES / "dump")
    del structured[12]
    records, source = step_records(
        parsed, tokens_per_step=4096, world_size=2, structured=structured
    )
    assert source == "structured_logs+tps"
    assert records[5]["step_time_s"] == pytest.approx(0.583)
    assert records[11]["step_time_source"] == "tps"
    assert records[11]["step_time_s"] == pytest.approx(4096 / (3368 * 2))
    assert records[0]["tokens"] == 4096 and records[0]["tokens_per_s"] == 84


# torchtitan's metrics logger line (torchtitan/components/metrics.py), with its ANSI colours
TITAN_LINE = (
    "\x1b[31mstep: {step:2}  \x1b[32mloss: {loss:8.5f}  \x1b[38;2;180;60;0mgrad_norm: "
    "{gn:7.4f}  \x1b[33mmemory: {gib:5.2f}GiB({pct:.2f}%)  \x1b[34mtps: {tps:,}  "
    "\x1b[36mtflops: {tflops:,.2f}  \x1b[35mmfu: {mfu:.2f}%\x1b[39m"
)


def titan_lines(losses: dict[int, float], prefix: str = "") -> str:
    return "".join(
        prefix
        + "[titan] 2026-09-21 10:15:06,000 - root - INFO - "
        + TITAN_LINE.format(
            step=step, loss=loss, gn=1.5, gib=38.27, pct=62.15, tps=2246, tflops=25.2, mfu=7.12
        )
        + "\n"
        for step, loss in losses.items()
    )


def test_step_records_keep_rank0_lines_and_fail_a_step_logged_twice():
    text = (
        "[rank1]:step:  1  loss:  9.00000  tps: 10\n"
        "[rank0]:step:  1  loss:  2.00000  tps: 1,000\n"
        "[rank0]:step:  2  loss:  3.00000  tps: 2,000\n"
    )
    records, _ = step_records(parse_titan_log(text), tokens_per_step=1000, world_size=1)
    assert [(r["step"], r["loss"]) for r in records] == [(1, 2.0), (2, 3.0)]
    twice = titan_lines({1: 2.0, 2: 1.9}, "[rank0]:") + titan_lines({2: 1.8}, "[rank0]:")
    with pytest.raises(
        InvalidLog,
        match=r"^console\.log: step 2 is duplicated \(2 times, "
        r"lines 2, 3\)$",
    ):
        step_records(
            parse_titan_log(twice), tokens_per_step=1000, world_size=1, source="console.log"
        )


def test_pipeline_placeholder_loss_is_no_loss_and_not_non_finite():
    # under pipeline parallelism the logging rank (first stage) prints loss -1 every step
    records, _ = step_records(
        parse_titan_log(titan_lines({1: -1.0, 2: -1.0})), tokens_per_step=4096, world_size=2
    )
    assert [(r["loss"], r["loss_placeholder"]) for r in records] == [(None, True), (None, True)]
    # the timing is unaffected
    assert all(r["step_time_s"] == pytest.approx(4096 / (2246 * 2)) for r in records)
    (real,), _ = step_records(
        parse_titan_log(titan_lines({1: 2.5})), tokens_per_step=4096, world_size=2
    )
    assert real["loss"] == 2.5 and "loss_placeholder" not in real


def test_a_pipeline_parallel_log_in_torchtitans_shape_gives_placeholders_and_real_times():
    # console_npu_pp_rank0_color.log: console_npu_color.log as the first pipeline stage (the
    # logging rank, [rank0]) prints it: loss {-1:8.5f} on every step, ANSI colours as
    # torchtitan's logger writes them, a 1-D ['pp'] mesh, no validation lines
    text = (FIXTURES / "console_npu_pp_rank0_color.log").read_text()
    assert "\x1b[31mstep:  6  \x1b[32mloss: -1.00000  \x1b[38;2;180;60;0mgrad_norm:" in text
    records, source = step_records(
        parse_titan_log(text, world_size=2),
        tokens_per_step=8192,
        world_size=2,
        source="console.log",
    )
    assert [r["step"] for r in records] == list(range(1, 13)) and source == "log"
    assert all(r["loss"] is None and r["loss_placeholder"] is True for r in records)
    assert [r["step_time_s"] for r in records][5:10] == [0.587, 0.592, 0.590, 0.595, 0.589]
    assert (records[5]["grad_norm"], records[5]["mfu_pct"]) == (5.9981, 11.06)
    # the strict verdict parser reads the same window from the same lines
    assert parse_step_times(text, 6, 10) == {6: 0.587, 7: 0.592, 8: 0.590, 9: 0.595, 10: 0.589}


def test_traces_are_found_by_iteration_and_rank():
    traces = find_titan_traces(FIXTURES / "dump")
    assert list(traces) == [10]
    assert [p.name for p in traces[10]] == ["rank0_trace.json.gz", "rank1_trace.json.gz"]
    with gzip.open(traces[10][1], "rt") as fh:
        assert json.load(fh)["distributedInfo"]["rank"] == 1
    assert find_titan_traces(FIXTURES / "dump" / "profile") == traces
    assert find_titan_traces(FIXTURES / "missing") == {}


# --- running ----------------------------------------------------------------------------------

# A stand-in for torchtitan's entry: parses the options afbench passes, prints step lines in
# torchtitan's format (colours unless disabled), writes structured logs and a trace.
FAKE_TRAIN = """
import json, logging, os, sys, time

def opt(name, default=None):
    a = sys.argv
    return a[a.index(name) + 1] if name in a else default

def main(npu=False):
    logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                        format="[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s")
    log = logging.getLogger()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    steps = int(opt("--training.steps"))
    tokens = int(opt("--training.global_batch_size")) * int(opt("--training.seq_len")) // world
    dump = opt("--dump_folder")
    fail_at = int(os.environ.get("FAKE_TITAN_FAIL_AT", "0"))
    nan_at = int(os.environ.get("FAKE_TITAN_NAN_AT", "0"))
    twice = int(os.environ.get("FAKE_TITAN_TWICE", "0"))
    color = "--metrics.disable_color_printing" not in sys.argv
    red, reset = ("\\033[31m", "\\033[39m") if color else ("", "")
    out = None
    if "--debug.no-enable-structured-logging" not in sys.argv:
        os.makedirs(os.path.join(dump, "structured_logs"), exist_ok=True)
        out = open(os.path.join(dump, "structured_logs",
                                f"training.global_rank_{rank}.20260921-101402-FAKE00.jsonl"), "w")
    log.info("Training starts at step 1")
    last = time.perf_counter()
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        time.sleep(0.01)
        if step == fail_at:
            log.error("RuntimeError: NPU out of memory")
            sys.exit(1)
        if out:
            out.write(json.dumps({"rank": rank, "step": step, "log_type": "event",
                                  "log_type_name": "step_end",
                                  "value": (time.perf_counter() - t0) * 1000}) + "\\n")
            out.flush()
        dt, last = time.perf_counter() - last, time.perf_counter()
        loss = float("nan") if step == nan_at else 3 - step / 10
        line = (f"{red}step: {step:2}  loss: {loss:8.5f}  grad_norm: {1.5:7.4f}  "
                f"memory: {1.25:5.2f}GiB(2.00%)  tps: {round(tokens / dt):,}  tflops: {0.5:,.2f}  "
                f"mfu: 0.10%")
        if npu:
            line += f"  elapsed_time_per_step: {dt:.3f}s"
        log.info(line + reset)
        if step == twice:
            log.info(line + reset)
    folder = opt("--profiler.save_traces_folder") or opt("--profiling.save_traces_folder")
    if folder and opt("--profiler.profile_freq"):
        d = os.path.join(folder, "iteration_" + opt("--profiler.profile_freq"))
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, f"rank{rank}_trace.json.gz"), "wb").close()
    log.info("Training completed")

if __name__ == "__main__":
    main()
"""


@pytest.fixture
def fake_torchtitan(tmp_path, monkeypatch):
    root = tmp_path / "site"
    (root / "torchtitan").mkdir(parents=True)
    (root / "torchtitan" / "__init__.py").write_text("")
    (root / "torchtitan" / "train.py").write_text(FAKE_TRAIN)
    (root / "torchtitan_npu").mkdir()
    (root / "torchtitan_npu" / "__init__.py").write_text("")
    (root / "torchtitan_npu" / "entry.py").write_text(
        "from torchtitan.train import main\nmain(npu=True)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(root))
    return root


def cuda_run(
    compose_cfg, tmp_path, engine: TorchtitanEngine, index: int = 2, backend: str = "cuda"
):
    cfg = validate_config(
        compose_cfg(
            "experiment=sft_af_compare",
            "verdict.rounds=1",
            f"backend={backend}",
            "parallel.world_size=2",
            "scheduler.micro_batch_size=2",
        )
    )
    spec = with_engine(make_plan(cfg, tmp_path / "out").runs[index], engine)
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True)
    return spec, run_dir


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_run_is_skipped_when_torchtitan_is_not_importable(compose_cfg, tmp_path, hide_torchtitan):
    spec, run_dir = cuda_run(compose_cfg, tmp_path, TorchtitanEngine())
    with pytest.raises(RunSkipped, match="torchtitan importable") as err:
        run_torchtitan(spec, run_dir)
    assert "install torchtitan" in str(err.value)
    assert not (run_dir / "metrics.jsonl").exists()


def test_run_with_a_missing_train_script_is_skipped(compose_cfg, tmp_path):
    engine = TorchtitanEngine(
        flavor="torchtitan_npu", train_script="scripts/run_train.sh", workdir=str(tmp_path)
    )
    spec, run_dir = cuda_run(compose_cfg, tmp_path, engine)
    with pytest.raises(RunSkipped, match="train_script"):
        run_torchtitan(spec, run_dir)


def test_a_cpu_run_of_flavor_torchtitan_runs_afbenchs_cpu_entry(compose_cfg, tmp_path):
    def entry(spec, engine):
        argv, _ = build_command(with_engine(spec, engine), engine, "python")
        return argv[argv.index("--module") - 1]

    cpu, _ = cuda_run(compose_cfg, tmp_path / "cpu", TorchtitanEngine(), backend="cpu")
    cuda, _ = cuda_run(compose_cfg, tmp_path / "cuda", TorchtitanEngine())
    assert entry(cpu, TorchtitanEngine()) == CPU_ENTRY == "afbench.engines.torchtitan.cpu_entry"
    assert entry(cuda, TorchtitanEngine()) == "torchtitan.train"
    # a named entry, or torchtitan-npu, is never replaced (preflight refuses them on cpu)
    assert entry(cpu, TorchtitanEngine(entry="my_titan.train")) == "my_titan.train"
    assert entry(cpu, TorchtitanEngine(flavor="torchtitan_npu")) == "torchtitan_npu.entry"


def test_run_writes_metrics_and_reference_lines(compose_cfg, tmp_path, fake_torchtitan, capsys):
    spec, run_dir = cuda_run(compose_cfg, tmp_path, TorchtitanEngine())  # af_off-profile-r1
    result = run_torchtitan(spec, run_dir)
    out = capsys.readouterr().out
    # torchtitan's own lines are streamed, and afbench's line follows for each step
    assert "Training completed" in out
    times = parse_step_times(out, 6, 10)
    recs = metrics(run_dir)
    assert [r["step"] for r in recs] == list(range(1, 13))
    assert {r["step_time_source"] for r in recs} == {"structured_logs"}
    assert times == {r["step"]: pytest.approx(r["step_time_s"], abs=1e-6) for r in recs[5:10]}
    assert recs[0]["tokens"] == 4 * 256 and recs[0]["loss"] == pytest.approx(2.9)
    assert result.step_time_source == "structured_logs"
    assert result.profile_traces.keys() == {"10"}
    assert result.argv[result.argv.index("--training.steps") + 1] == "12"
    assert (run_dir / "titan" / "console.log").is_file()
    assert [s.name for s in result.switches] == ["profiler"]
    # afbench's config function (the default) reads data.path from AFBENCH_DATA_PATH
    assert result.env["AFBENCH_DATA_PATH"] == spec.config.data.path
    assert "data.path" not in result.not_translated
    assert "model.path" not in result.not_translated
    # torchtitan's own memory / TFLOPs / MFU of steps 6-10 (the fake prints 1.25 GiB, 0.5, 0.1%)
    assert result.memory.peak_reserved_gib == 1.25 and result.memory.peak_reserved_pct == 2.0
    assert (result.efficiency.tflops_per_device, result.efficiency.mfu_pct) == (0.5, 0.1)
    assert result.memory.source.key == "src_titan_memory"
    assert result.memory.source.text.startswith("torchtitan step log")
    assert result.memory.window.text == "steps 6-10"


def test_run_counts_afbench_tflops_beside_torchtitans_from_the_model_config(
    compose_cfg, tmp_path, fake_torchtitan
):
    from afbench.analysis import flops

    spec, run_dir = cuda_run(compose_cfg, tmp_path, TorchtitanEngine(), index=0)
    cfg = spec.config.model_copy(
        update={"backend": spec.config.backend.model_copy(update={"peak_tflops": 2.0})}
    )
    result = run_torchtitan(spec.model_copy(update={"config": cfg}), run_dir)
    recs = [r for r in metrics(run_dir) if 6 <= r["step"] <= 10]
    model_config = json.loads((Path(cfg.model.path) / "config.json").read_text())
    per_token = flops.training_flops_per_token(
        flops.TransformerShape.from_config(model_config), cfg.scheduler.seq_len
    )
    tps = len(recs) * 1024 / sum(r["step_time_s"] for r in recs) / 2
    assert result.efficiency.flops_per_token == per_token
    assert result.efficiency.afbench_tflops_per_device == pytest.approx(tps * per_token / 1e12)
    assert result.efficiency.afbench_mfu_pct == pytest.approx(
        result.efficiency.afbench_tflops_per_device / 2.0 * 100
    )
    assert result.efficiency.tflops_per_device == 0.5  # torchtitan's own stays beside it
    # without <model.path>/config.json afbench says why it has no count
    spec, run_dir = cuda_run(compose_cfg, tmp_path / "no-config", TorchtitanEngine(), index=0)
    cfg = spec.config.model_copy(
        update={"model": spec.config.model.model_copy(update={"path": str(tmp_path / "empty")})}
    )
    result = run_torchtitan(spec.model_copy(update={"config": cfg}), run_dir)
    assert result.efficiency.afbench_tflops_per_device is None
    assert result.efficiency.tflops_per_device == 0.5
    assert result.efficiency.afbench_source.text.startswith(
        f"n/a: {tmp_path / 'empty'}/config.json"
    )


def test_run_without_structured_logs_derives_step_time_from_tps(
    compose_cfg, tmp_path, fake_torchtitan, capsys
):
    engine = TorchtitanEngine(extra_args=["--debug.no-enable-structured-logging"])
    spec, run_dir = cuda_run(compose_cfg, tmp_path, engine, index=0)
    result = run_torchtitan(spec, run_dir)
    assert result.step_time_source == "tps"
    recs = metrics(run_dir)
    assert all(r["step_time_s"] == pytest.approx(1024 / (r["tps_per_device"] * 2)) for r in recs)
    assert sorted(parse_step_times(capsys.readouterr().out, 6, 10)) == [6, 7, 8, 9, 10]


def test_npu_run_adds_no_second_line_for_steps_that_carry_their_time(
    compose_cfg, tmp_path, fake_torchtitan, capsys
):
    spec, run_dir = cuda_run(
        compose_cfg, tmp_path, TorchtitanEngine(flavor="torchtitan_npu"), index=1, backend="npu"
    )
    result = run_torchtitan(spec, run_dir)
    out = capsys.readouterr().out
    assert result.step_time_source == "log"
    assert sum("elapsed_time_per_step" in line for line in out.splitlines()) == 10
    assert sorted(parse_step_times(out, 6, 10)) == [6, 7, 8, 9, 10]  # no duplicates


def test_nan_loss_fails_the_run_with_the_common_wording(
    compose_cfg, tmp_path, fake_torchtitan, monkeypatch
):
    monkeypatch.setenv("FAKE_TITAN_NAN_AT", "4")
    spec, run_dir = cuda_run(compose_cfg, tmp_path, TorchtitanEngine(), index=0)
    with pytest.raises(RunFailed, match=r"^non-finite loss \(nan\) at step 4$"):
        run_torchtitan(spec, run_dir)
    assert [r["step"] for r in metrics(run_dir)] == list(range(1, 11))


def test_a_step_logged_twice_fails_the_run(compose_cfg, tmp_path, fake_torchtitan, monkeypatch):
    monkeypatch.setenv("FAKE_TITAN_TWICE", "7")
    spec, run_dir = cuda_run(compose_cfg, tmp_path, TorchtitanEngine(), index=0)
    with pytest.raises(RunFailed, match=r"console\.log: step 7 is duplicated \(2 times, lines"):
        run_torchtitan(spec, run_dir)


def test_failing_run_raises_and_keeps_the_steps_it_logged(
    compose_cfg, tmp_path, fake_torchtitan, monkeypatch
):
    monkeypatch.setenv("FAKE_TITAN_FAIL_AT", "4")
    spec, run_dir = cuda_run(compose_cfg, tmp_path, TorchtitanEngine(), index=0)
    with pytest.raises(RunFailed, match="exited with status"):
        run_torchtitan(spec, run_dir)
    assert [r["step"] for r in metrics(run_dir)] == [1, 2, 3]
