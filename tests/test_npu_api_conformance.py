"""The torch_npu names afbench uses, pinned against bench/results/npu_api_conformance.txt (what
bench/npu_api_conformance.py found in the released torch_npu wheels). A new torch_npu /
torchair / inductor_npu_ext use without a conformance line fails here: rerun the bench script
(it downloads the wheels) and commit its result. No network here: the committed file is read."""

from __future__ import annotations

import ast
import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RERUN = "rerun .venv/bin/python bench/npu_api_conformance.py and commit its result file"


@pytest.fixture(scope="module")
def conf():
    sys.path.insert(0, str(REPO / "bench"))  # the script imports its _npu_* siblings
    try:
        yield importlib.import_module("npu_api_conformance")
    finally:
        sys.path.remove(str(REPO / "bench"))
        for name in ("npu_api_conformance", "_npu_scan", "_npu_wheel"):
            sys.modules.pop(name, None)


def test_every_npu_call_afbench_makes_has_a_conformance_line(conf):
    scanned = set(conf.scan_calls())  # src/afbench
    for version, recorded in conf.read_results().items():
        assert scanned - set(recorded) == set(), f"not checked against torch-npu {version}: {RERUN}"
        assert set(recorded) - scanned == set(), f"stale lines for torch-npu {version}: {RERUN}"


def test_every_call_is_ok_against_the_released_wheel(conf):
    released = conf.WHEELS[0][0].split("==")[1]
    recorded = conf.read_results()[released]
    assert recorded and {k: v for k, v in recorded.items() if v != "ok"} == {}


def test_the_reference_pin_is_recorded_too(conf):
    assert set(conf.read_results()) == {req.split("==")[1] for req, _ in conf.WHEELS}


def test_scan_follows_aliases_getattr_imports_and_compile_backends(conf, tmp_path):
    src = tmp_path / "afbench"
    src.mkdir()
    (src / "m.py").write_text(
        "import importlib, torch\n"
        "from torch_npu.profiler import schedule as sch\n"
        "sch(wait=1)\n"
        "def peak(mod, i):\n    return mod.max_memory_allocated(i)\n"
        "class B:\n"
        "    def f(self, cfg, fn, d):\n"
        "        prof = self.torch_npu.profiler\n"
        "        prof.profile(activities=[prof.ProfilerActivity.NPU], **d)\n"
        "        getattr(prof.ExportType, cfg.export_type)\n"
        "        importlib.import_module('inductor_npu_ext')\n"
        "        peak(torch.npu, 0)\n"
        "        torch.compile(fn, backend='npugraph_ex', dynamic=False)\n"
        "        torch.compile(fn, backend='inductor')\n"
        "        return self.torch_npu.npu_rms_norm\n"
    )
    assert set(conf.scan_calls(src)) == {
        "torch_npu.profiler.profile(activities=, **d)",
        "torch_npu.profiler.ProfilerActivity.NPU",
        "torch_npu.profiler.ExportType[cfg.export_type]",
        "import inductor_npu_ext",
        "torch.npu.max_memory_allocated(<1 positional>)",
        "torch_npu.npu_rms_norm",
        'torch.compile(backend="npugraph_ex", <1 positional>, dynamic=)',
        "import torch_npu.profiler",
        "torch_npu.profiler.schedule(wait=)",
    }


def _wheel(tmp_path, files: dict[str, str]):
    path = tmp_path / "torch_npu-9.9.9-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("torch_npu-9.9.9.dist-info/METADATA", "Name: torch-npu\n")
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_check_names_a_parameter_the_wheel_does_not_take(conf, tmp_path):
    wheel = conf.Wheel(
        _wheel(
            tmp_path,
            {
                "torch_npu/__init__.py": "",
                "torch_npu/profiler/__init__.py": "from .profiler import profile\n"
                "from .scheduler import Schedule as schedule\n",
                "torch_npu/profiler/profiler.py": "class profile:\n"
                "    def __init__(self, *, activities=None): pass\n",
                "torch_npu/profiler/scheduler.py": "class Schedule:\n"
                "    def __init__(self, wait, active, warmup=0): pass\n",
            },
        )
    )
    assert conf.check(wheel, "torch_npu.profiler.profile(activities=)").status == "ok"
    assert (
        conf.check(wheel, "torch_npu.profiler.profile(activities=, with_stack=)").status
        == "WRONG: no parameter 'with_stack'"
    )
    # **args of schedule holds wait, warmup, active, repeat: the fake has no repeat
    assert (
        "no parameter 'repeat'" in conf.check(wheel, "torch_npu.profiler.schedule(**args)").status
    )
    assert conf.check(
        wheel, "torch_npu.profiler.tensorboard_trace_handler(<1 positional>)"
    ).status.startswith("WRONG: torch_npu.profiler.tensorboard_trace_handler not found")


def test_starstar_keys_are_what_the_profiler_passes(conf):
    # read from the source: importing switches.profiler would import torch for one dict
    tree = ast.parse((REPO / "src/afbench/switches/step_profiler.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "schedule_args")
    returned = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Return))
    assert set(conf.STARSTAR["**args"]) == {k.value for k in returned.keys}
