"""The npu and cuda backends run on this CPU up to the device calls: a fake ``torch_npu`` in
sys.modules and fake ``torch.npu`` / ``torch.cuda`` functions record what afbench asks of
them. Nothing here proves the calls work on a real NPU or GPU (none is available); it pins
what afbench passes to them (docs/reference.md §3-§4). Also: the CANN environment of NPU workers, and
the model presets for real hardware."""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types

import pytest
import torch

from afbench.backends.resolve import get_backend
from afbench.config import validate_config
from afbench.config.models import CompileConfig, NpuProfilerConfig, ProfilerWindow
from afbench.errors import PreflightError, RunSkipped

GiB = 2**30


class Recorder:
    """A callable that records its calls and returns ``result`` (or ``result(*a, **kw)``)."""

    def __init__(self, name: str, result=None):
        self.name, self.result, self.calls = name, result, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result(*args, **kwargs) if callable(self.result) else self.result


class Enum:
    """Stands in for a torch_npu enum: attributes are tagged strings, unknown names fail."""

    def __init__(self, name: str, *members: str):
        for m in members:
            setattr(self, m, f"{name}.{m}")


def reference_add_rms_norm(x1, x2, gamma, epsilon=1e-6):
    x = x1 + x2
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    return x * rstd * gamma, rstd, x


def reference_rms_norm(x, gamma, epsilon=1e-6):
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    return x * rstd * gamma, rstd


class FakeProfile:
    def __init__(self, **kwargs):
        self.kwargs, self.steps, self.entered, self.exited = kwargs, 0, False, False

    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, *exc):
        self.exited = True

    def step(self):
        self.steps += 1


@pytest.fixture
def fake_npu(monkeypatch):
    """A fake torch_npu module and torch.npu namespace; returns the module."""
    mod = types.ModuleType("torch_npu")
    mod.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    mod.__version__ = "2.x.fake"
    mod.npu_add_rms_norm = Recorder("npu_add_rms_norm", reference_add_rms_norm)
    mod.npu_rms_norm = Recorder("npu_rms_norm", reference_rms_norm)
    prof = types.SimpleNamespace(
        ProfilerActivity=Enum("ProfilerActivity", "CPU", "NPU"),
        ProfilerLevel=Enum("ProfilerLevel", "Level0", "Level1", "Level2", "Level_none"),
        AiCMetrics=Enum(
            "AiCMetrics",
            "ArithmeticUtilization",
            "PipeUtilization",
            "Memory",
            "L2Cache",
            "AiCoreNone",
        ),
        ExportType=Enum("ExportType", "Text", "Db"),
        _ExperimentalConfig=Recorder("_ExperimentalConfig", lambda **kw: ("experimental", kw)),
        schedule=Recorder("schedule", lambda **kw: ("schedule", kw)),
        tensorboard_trace_handler=Recorder("tensorboard_trace_handler", lambda d: ("handler", d)),
        profile=Recorder("profile", lambda **kw: FakeProfile(**kw)),
    )
    mod.profiler = prof
    npu = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 8,
        set_device=Recorder("set_device"),
        synchronize=Recorder("synchronize"),
        reset_peak_memory_stats=Recorder("reset_peak_memory_stats"),
        max_memory_allocated=Recorder("max_memory_allocated", 3 * GiB),
        max_memory_reserved=Recorder("max_memory_reserved", 4 * GiB),
        get_device_name=lambda i=0: "Ascend910B-fake",
    )
    monkeypatch.setitem(sys.modules, "torch_npu", mod)
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    return mod


@pytest.fixture
def compile_calls(monkeypatch):
    rec = Recorder("torch.compile", lambda fn, **kw: ("compiled", fn))
    monkeypatch.setattr(torch, "compile", rec)
    return rec.calls


@pytest.fixture
def autofuse_ext(monkeypatch):
    monkeypatch.setitem(sys.modules, "inductor_npu_ext", types.ModuleType("inductor_npu_ext"))


def npu_backend():
    from afbench.backends.npu import NpuBackend

    return NpuBackend()


# ---------------------------------------------------------------- backend instantiation


def test_npu_backend_without_torch_npu_skips_the_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    with pytest.raises(
        RunSkipped, match=r"backend npu needs torch_npu \(pip install afbench\[npu\]\)"
    ):
        get_backend("npu")


# ---------------------------------------------------------------- npu: device, memory


def test_npu_device_is_the_first_visible_one_or_the_ranks(fake_npu, monkeypatch):
    backend = npu_backend()
    # torch without torch_npu has no "npu" device type: record what device() builds
    monkeypatch.setattr(
        "afbench.backends.npu.torch.device", lambda kind, index=None: ("device", kind, index)
    )
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert backend.device() == ("device", "npu", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert backend.device() == ("device", "npu", 1)
    assert [c[0] for c in torch.npu.set_device.calls] == [(0,), (1,)]


def test_npu_sync_and_memory_read_torch_npu(fake_npu, monkeypatch):
    backend = npu_backend()
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    backend.synchronize()
    backend.reset_peak_memory()
    assert len(torch.npu.synchronize.calls) == 1
    assert torch.npu.reset_peak_memory_stats.calls == [((0,), {})]
    peak = backend.peak_memory()
    assert (peak.peak_memory_allocated_gib, peak.peak_memory_reserved_gib) == (3.0, 4.0)
    assert peak.peak_rss_gib is None
    assert peak.source.text == (
        "torch.npu.max_memory_allocated / max_memory_reserved of npu:0 "
        "after torch.npu.reset_peak_memory_stats"
    )
    assert torch.npu.max_memory_reserved.calls == [((0,), {})]
    assert backend.versions()["torch_npu"] == "2.x.fake"
    assert backend.describe() == "npu (Ascend910B-fake)"


# ---------------------------------------------------------------- npu: switches


def test_autofuse_on_npu_is_inductor_with_the_ascendc_backend(
    fake_npu, autofuse_ext, compile_calls
):
    module = torch.nn.Linear(2, 2)
    cfg = CompileConfig(
        mode="max-autotune", fullgraph=True, dynamic=False, options={"trace.enabled": True}
    )
    compiled, detail = npu_backend().compile(module, cfg)
    assert compiled == ("compiled", module)
    ((args, kwargs),) = compile_calls
    assert args == (module,)
    assert kwargs == {
        "backend": "inductor",
        "mode": "max-autotune",
        "fullgraph": True,
        "dynamic": False,
        "options": {"npu_backend": "ascendc", "trace.enabled": True},
    }
    assert "npu_backend': 'ascendc'" in detail and "AutoFuse" in detail


def test_autofuse_on_npu_ignores_compile_backend_setting(fake_npu, autofuse_ext, compile_calls):
    npu_backend().compile(torch.nn.Linear(2, 2), CompileConfig(backend="aot_eager"))
    assert compile_calls[0][1]["backend"] == "inductor"


def test_autofuse_on_npu_without_inductor_npu_ext_skips_the_run(
    fake_npu, compile_calls, monkeypatch
):
    monkeypatch.setitem(sys.modules, "inductor_npu_ext", None)
    with pytest.raises(RunSkipped, match="inductor_npu_ext package from torchair"):
        npu_backend().compile(torch.nn.Linear(2, 2), CompileConfig())
    assert compile_calls == []


def test_autofuse_on_torch_npu_2_14_needs_no_inductor_npu_ext(
    fake_npu, compile_calls, monkeypatch, tmp_path
):
    # torch_npu 2.14.0's wheel holds torch_npu/_inductor/ascendc (npu_api_conformance.txt)
    (tmp_path / "torch_npu" / "_inductor" / "ascendc").mkdir(parents=True)
    fake_npu.__file__ = str(tmp_path / "torch_npu" / "__init__.py")
    monkeypatch.setitem(sys.modules, "inductor_npu_ext", None)
    npu_backend().compile(torch.nn.Linear(2, 2), CompileConfig())
    assert compile_calls[0][1]["options"] == {"npu_backend": "ascendc"}


def test_npugraph_ex_is_a_static_fullgraph_compile(fake_npu, compile_calls):
    def step(x):
        return x

    graph, detail = npu_backend().graph_mode(step, {"force_eager": True})
    assert graph == ("compiled", step)
    assert compile_calls == [
        (
            (step,),
            {
                "backend": "npugraph_ex",
                "fullgraph": True,
                "dynamic": False,
                "options": {"force_eager": True},
            },
        )
    ]
    assert "npugraph_ex" in detail
    npu_backend().graph_mode(step, {})
    assert compile_calls[1][1]["options"] is None


def test_fused_norm_ops_on_npu_are_torch_npus(fake_npu):
    backend = npu_backend()
    assert backend.add_rms_norm() == (fake_npu.npu_add_rms_norm, "torch_npu.npu_add_rms_norm")
    assert backend.rms_norm() == (fake_npu.npu_rms_norm, "torch_npu.npu_rms_norm")


@pytest.fixture
def tiny_qwen3():
    """A randomly initialised 2-layer Qwen3 of a few thousand parameters (not a real model).
    Built before the fake torch_npu exists: transformers would take it for a real one and
    import its flash-attention kernels."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
    )
    return Qwen3ForCausalLM(cfg).eval()


def test_converters_on_npu_call_torch_npus_ops_with_the_layers_weights(tiny_qwen3, fake_npu):
    from afbench.config.models import OptimizationConfig
    from afbench.switches.base import SwitchContext
    from afbench.switches.registry import apply_stage

    model = tiny_qwen3
    ids = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    cfg = types.SimpleNamespace(optimization=OptimizationConfig(add_rmsnorm=True, rmsnorm=True))
    reports = apply_stage("model", SwitchContext(cfg, npu_backend(), model=model))
    with torch.no_grad():
        got = model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert [r.detail.text.split(": ")[1] for r in reports] == [
        "residual add + post_attention_layernorm -> torch_npu.npu_add_rms_norm",
        "RMSNorm -> torch_npu.npu_rms_norm",
    ]
    add_calls = fake_npu.npu_add_rms_norm.calls
    assert len(add_calls) == 2  # one per decoder layer
    layer0 = model.model.layers[0]
    (residual, attn_out, gamma, eps), _ = add_calls[0]
    assert gamma is layer0.post_attention_layernorm.weight and eps == pytest.approx(1e-6)
    assert residual.shape == attn_out.shape == (2, 7, 32)
    # input norms and the final norm (hidden 32) and q/k norms (head_dim 8) per layer
    shapes = sorted({c[0][0].shape[-1] for c in fake_npu.npu_rms_norm.calls})
    assert shapes == [8, 32]


# ---------------------------------------------------------------- npu: profiler


@pytest.mark.parametrize(
    "cfg, expected",
    [
        (
            NpuProfilerConfig(),
            ("ProfilerLevel.Level1", "AiCMetrics.ArithmeticUtilization", "ExportType.Text"),
        ),
        (
            NpuProfilerConfig(
                profiler_level="Level2", aic_metrics="PipeUtilization", export_type="Db"
            ),
            ("ProfilerLevel.Level2", "AiCMetrics.PipeUtilization", "ExportType.Db"),
        ),
        (
            NpuProfilerConfig(profiler_level="Level_none", aic_metrics="AiCoreNone"),
            ("ProfilerLevel.Level_none", "AiCMetrics.AiCoreNone", "ExportType.Text"),
        ),
    ],
)
def test_profiler_settings_map_yaml_names_to_torch_npu_enums(fake_npu, cfg, expected):
    settings = npu_backend().npu_profiler_settings(cfg)
    assert settings == (
        "experimental",
        dict(zip(("profiler_level", "aic_metrics", "export_type"), expected)),
    )


def test_unknown_aic_metric_fails_at_plan_time(fake_npu):
    # the AiCMetrics members of torch_npu 2.12.0rc1 / 2.14.0 (bench/npu_api_conformance.py)
    with pytest.raises(ValueError, match="aic_metrics"):
        NpuProfilerConfig(aic_metrics="NoSuchMetric")


def test_npu_step_profiler_records_exactly_the_window(fake_npu, tmp_path):
    from afbench.switches.step_profiler import StepProfiler

    window = ProfilerWindow(first_step=6, last_step=10, warmup_steps=1, record_shapes=True)
    with StepProfiler(
        npu_backend(), window, tmp_path / "profile", NpuProfilerConfig(export_type="Db")
    ) as sp:
        for _ in range(12):
            sp.step()
    prof = fake_npu.profiler
    assert prof.schedule.calls == [
        ((), {"skip_first": 0, "wait": 4, "warmup": 1, "active": 5, "repeat": 1})
    ]
    assert prof.tensorboard_trace_handler.calls == [((str(tmp_path / "profile"),), {})]
    ((_, kwargs),) = prof.profile.calls
    assert kwargs["activities"] == ["ProfilerActivity.CPU", "ProfilerActivity.NPU"]
    assert kwargs["schedule"] == ("schedule", prof.schedule.calls[0][1])
    assert kwargs["on_trace_ready"] == ("handler", str(tmp_path / "profile"))
    assert kwargs["record_shapes"] is True and kwargs["with_stack"] is False
    assert kwargs["experimental_config"][1]["export_type"] == "ExportType.Db"
    assert sp.prof.entered and sp.prof.exited and sp.prof.steps == 12


# ---------------------------------------------------------------- cuda


@pytest.fixture
def fake_cuda(monkeypatch):
    calls = {}
    for name, result in (
        ("set_device", None),
        ("synchronize", None),
        ("reset_peak_memory_stats", None),
        ("max_memory_allocated", 1.5 * GiB),
        ("max_memory_reserved", 2 * GiB),
        ("get_device_name", "H100-fake"),
    ):
        calls[name] = Recorder(name, result)
        monkeypatch.setattr(torch.cuda, name, calls[name])
    from afbench.backends.cuda import CudaBackend

    return CudaBackend(), calls


def test_cuda_graph_mode_is_reduce_overhead_cuda_graphs(fake_cuda, compile_calls):
    backend, _ = fake_cuda

    def step(x):
        return x

    graph, detail = backend.graph_mode(step, {})
    assert graph == ("compiled", step)
    assert compile_calls == [
        ((step,), {"mode": "reduce-overhead", "fullgraph": True, "dynamic": False})
    ]
    assert "CUDA graphs" in detail


def test_cuda_autofuse_is_plain_inductor(fake_cuda, compile_calls):
    backend, _ = fake_cuda
    backend.compile(torch.nn.Linear(2, 2), CompileConfig())
    assert compile_calls[0][1] == {
        "backend": "inductor",
        "mode": None,
        "fullgraph": False,
        "dynamic": None,
        "options": None,
    }


def test_cuda_device_sync_and_memory_read_torch_cuda(fake_cuda, monkeypatch):
    backend, calls = fake_cuda
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert backend.device() == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert backend.device() == torch.device("cuda", 3)
    assert [c[0] for c in calls["set_device"].calls] == [(0,), (3,)]
    backend.synchronize()
    backend.reset_peak_memory()
    assert len(calls["synchronize"].calls) == 1
    # rank 3's own device: the counters and the peaks are per device
    assert calls["reset_peak_memory_stats"].calls == [((3,), {})]
    assert backend.peak_memory().fields() == {
        "peak_memory_allocated_gib": 1.5,
        "peak_memory_reserved_gib": 2.0,
        "peak_rss_gib": None,
        "memory_source": {
            "key": "src_device_memory",
            "args": {"kind": "cuda", "device": "cuda:3"},
            "text": "torch.cuda.max_memory_allocated / max_memory_reserved of cuda:3 "
            "after torch.cuda.reset_peak_memory_stats",
        },
    }
    assert calls["max_memory_allocated"].calls == [((3,), {})]
    assert calls["max_memory_reserved"].calls == [((3,), {})]
    assert backend.device_name() == "H100-fake"
    assert backend.profiler_activities() == [
        torch.profiler.ProfilerActivity.CPU,
        torch.profiler.ProfilerActivity.CUDA,
    ]


def test_cuda_has_no_native_fused_norm_ops(fake_cuda):
    backend, _ = fake_cuda
    assert backend.add_rms_norm() == (None, "") and backend.rms_norm() == (None, "")


# ---------------------------------------------------------------- CANN environment


SET_ENV = r"""
# a fake CANN set_env.sh: the shapes real ones have
export ASCEND_TOOLKIT_HOME="{root}"
export ASCEND_HOME_PATH="{root}"
export LD_LIBRARY_PATH="{root}/lib64:{root}/lib64/plugin:$LD_LIBRARY_PATH"
export PYTHONPATH="{root}/python/site-packages:$PYTHONPATH"
export PATH="{root}/bin:$PATH"
export ASCEND_OPP_PATH="{root}/opp"
export MULTILINE="a=b
c"
export LD_PRELOAD=/usr/lib/libjemalloc.so
export PYTHONHOME=/opt/other-python
export CONDA_PREFIX=/opt/conda
echo "CANN env set (this goes to stdout)"
[ -d /nonexistent-afbench ] && echo never
"""


@pytest.fixture
def cann_root(tmp_path):
    root = tmp_path / "cann"
    (root / "lib64").mkdir(parents=True)
    (root / "set_env.sh").write_text(SET_ENV.format(root=root))
    return root


def test_cann_env_is_what_set_env_sh_sets_from_a_clean_shell(cann_root, monkeypatch):
    from afbench.backends.npu import cann_env

    monkeypatch.setenv("AFBENCH_LEAK_CHECK", "1")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/user/lib")
    env = cann_env(cann_root)
    assert env["ASCEND_TOOLKIT_HOME"] == str(cann_root)
    # the clean shell had no LD_LIBRARY_PATH / PYTHONPATH: only CANN's entries
    assert env["LD_LIBRARY_PATH"].split(":") == [
        f"{cann_root}/lib64",
        f"{cann_root}/lib64/plugin",
        "",
    ]
    assert env["PATH"].startswith(f"{cann_root}/bin:") and env["PATH"].endswith(os.environ["PATH"])
    assert env["MULTILINE"] == "a=b\nc"  # env -0: values with newlines and '=' survive
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    for gone in ("AFBENCH_LEAK_CHECK", "LD_PRELOAD", "PYTHONHOME", "CONDA_PREFIX", "SHLVL", "PWD"):
        assert gone not in env


def test_npu_worker_env_puts_cann_entries_first_and_drops_what_the_reference_unsets(cann_root):
    from afbench.backends.npu import npu_worker_env

    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/u",
        "LD_LIBRARY_PATH": "/user/lib",
        "LD_PRELOAD": "/x.so",
        "PYTHONHOME": "/p",
        "CONDA_PREFIX": "/c",
        "KEEP": "1",
    }
    env = npu_worker_env(base, cann_root)
    assert env["LD_LIBRARY_PATH"] == f"{cann_root}/lib64:{cann_root}/lib64/plugin:/user/lib"
    assert env["PATH"] == f"{cann_root}/bin:/usr/bin:/bin"
    assert env["KEEP"] == "1" and env["ASCEND_OPP_PATH"] == f"{cann_root}/opp"
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert not {"LD_PRELOAD", "PYTHONHOME", "CONDA_PREFIX"} & set(env)


def test_npu_worker_env_without_cann_root_keeps_the_sourced_shell(tmp_path):
    from afbench.backends.npu import npu_worker_env

    base = {"PATH": "/bin", "ASCEND_TOOLKIT_HOME": "/already", "LD_PRELOAD": "/x.so"}
    assert npu_worker_env(base, None) == {
        "PATH": "/bin",
        "ASCEND_TOOLKIT_HOME": "/already",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    }


def test_missing_or_failing_set_env_sh_is_a_preflight_error(tmp_path):
    from afbench.backends.npu import cann_env

    with pytest.raises(PreflightError, match="set_env.sh missing"):
        cann_env(tmp_path / "nowhere")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "set_env.sh").write_text("echo broken install >&2\nexit 3\n")
    with pytest.raises(PreflightError, match="exited 3: broken install"):
        cann_env(bad)


def test_npu_workers_get_the_cann_env_and_their_devices(
    compose_cfg, cann_root, tmp_path, monkeypatch
):
    from afbench.launch.local import worker_env
    from afbench.plan import make_plan

    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libtcmalloc.so")
    conf = validate_config(
        compose_cfg("backend=npu", f"++backend.cann_root={cann_root}", "parallel.devices=[1]")
    )
    spec = make_plan(conf, tmp_path / "out").runs[0]
    env = worker_env(spec, tmp_path / "run")
    assert env["ASCEND_TOOLKIT_HOME"] == str(cann_root)
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert "LD_PRELOAD" not in env
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "run" / "cache" / "inductor")


# ---------------------------------------------------------------- presets for real hardware


@pytest.mark.parametrize("preset", ["qwen3_0_6b", "qwen3_1_7b", "qwen3_8b"])
def test_model_presets_compose_and_validate_given_a_path(compose_cfg, preset):
    conf = validate_config(compose_cfg(f"model={preset}", "model.path=/models/Qwen3"))
    assert conf.model.name == preset and conf.model.path == "/models/Qwen3"
    assert conf.model.dtype == "bfloat16" and conf.model.manifest is None


def test_wordle_data_preset_composes_and_validates_given_a_path(compose_cfg):
    conf = validate_config(
        compose_cfg(
            "model=qwen3_1_7b",
            "model.path=/models/Qwen3-1.7B",
            "data=wordle",
            "data.path=/data/train.parquet",
            "experiment=sft_af_compare",
            "backend=npu",
        )
    )
    assert conf.data.name == "wordle" and conf.data.path == "/data/train.parquet"
    assert conf.data.packing is True


@pytest.mark.parametrize("group", ["model=qwen3_8b", "data=wordle"])
def test_presets_without_a_path_name_the_missing_key(compose_cfg, group):
    from afbench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"(model|data)\.path"):
        validate_config(compose_cfg(group))
