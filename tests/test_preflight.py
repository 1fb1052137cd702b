"""Preflight: one [PASS]/[FAIL] line per check, every FAIL with a concrete action."""

from __future__ import annotations

import shutil
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest

from afbench import preflight
from afbench.config import validate_config
from afbench.config.models import InferScheduler
from afbench.preflight import (
    CANN_COMPONENTS,
    Check,
    cann_build_dates,
    check_cann_dates,
    check_cann_layout,
    check_devices,
    check_disk,
    check_npu_smi,
    check_output_root,
    check_packages,
    check_platform,
    check_python,
    find_cann_root,
    read_build_date,
    run_preflight,
)

REPO_ASSETS = Path(__file__).resolve().parents[1] / "assets"


@pytest.fixture
def conf(compose_cfg):
    return validate_config(compose_cfg())


def with_section(conf, section: str, **changes):
    """A copy of ``conf`` with fields of one section replaced (no validation, so tests can
    build configs that pydantic would reject, such as duplicate device ids)."""
    return conf.model_copy(update={section: getattr(conf, section).model_copy(update=changes)})


def failed(checks: list[Check], item: str) -> Check:
    matches = [c for c in checks if c.item == item]
    assert matches, f"no check {item!r} in {[c.item for c in checks]}"
    assert not matches[0].ok, matches[0].line()
    return matches[0]


def fake_cann(root: Path, dates: dict[str, str] | None = None) -> Path:
    """A CANN tree with set_env.sh, lib64/, opp/ and the five version.info files."""
    dates = dates or {}
    (root / "lib64").mkdir(parents=True)
    (root / "opp").mkdir()
    (root / "set_env.sh").write_text("export ASCEND_TOOLKIT_HOME=here\n")
    for name, rel in CANN_COMPONENTS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"Version=9.0.0\ntimestamp={dates.get(name, '20260801_101500')}\n")
    return root


def fake_npu_smi(bindir: Path, fail_on_m: bool = False) -> Path:
    bindir.mkdir(exist_ok=True)
    exe = bindir / "npu-smi"
    body = (
        'if [ "$2" = "-m" ]; then echo "dcmi module initialize failed" >&2; exit 1; fi\n'
        if fail_on_m
        else ""
    )
    exe.write_text(f"#!/bin/sh\n{body}echo ok\nexit 0\n")
    exe.chmod(0o755)
    return exe


# --- line format -----------------------------------------------------------------------------


def test_pass_line_is_item_and_current():
    assert Check("python", True, "3.12.3").line() == "[PASS] python: current 3.12.3"


def test_fail_line_has_current_required_action():
    c = Check("free disk", False, "0.5 GiB free at /x", ">= 1 GiB", "free space there")
    assert c.line() == (
        "[FAIL] free disk: current 0.5 GiB free at /x; required >= 1 GiB; action free space there"
    )


# --- platform, python, packages --------------------------------------------------------------


def test_npu_needs_linux_aarch64():
    assert check_platform("npu", system="Linux", machine="aarch64", release="5.10").ok
    c = check_platform("npu", system="Linux", machine="x86_64", release="6.1")
    assert not c.ok and "Linux aarch64" in c.required and "backend=cpu" in c.action
    assert check_platform("cpu", system="Darwin", machine="arm64", release="23").ok
    assert not check_platform("cpu", system="Windows", machine="AMD64", release="11").ok


def test_python_older_than_3_10_fails():
    assert check_python((3, 10, 0)).ok
    c = check_python((3, 9, 18))
    assert not c.ok and c.current.startswith("3.9.18") and c.required == ">= 3.10"


def test_old_torch_and_missing_package_fail():
    checks = check_packages({"torch": "2.3.1+cpu", "transformers": None, "pandas": "2.2.0"})
    torch, transformers, pandas = checks
    assert not torch.ok and torch.required == ">= 2.4" and "pip install" in torch.action
    assert not transformers.ok and transformers.current == "not installed"
    assert pandas.ok and pandas.current == "2.2.0"
    assert check_packages({"torch": "2.13.0+cpu"})[0].ok


# --- backend and devices ---------------------------------------------------------------------


def test_duplicate_device_ids_fail():
    c = check_devices("npu", [1, 1], 2, device_count=8)
    assert not c.ok and "duplicate id(s) [1]" in c.current
    assert "parallel.devices=" in c.action


def test_device_id_beyond_device_count_fails():
    c = check_devices("cuda", [0, 2], 2, device_count=2)
    assert not c.ok and "[2] outside 0..1" in c.current
    assert c.action.startswith("set parallel.devices=[0,1]")
    assert check_devices("cuda", [1, 0], 2, device_count=2).ok
    assert not check_devices("cuda", None, 4, device_count=2).ok  # null -> 0..3


def test_device_ids_on_cpu_must_be_null():
    assert check_devices("cpu", None, 2, None).ok
    c = check_devices("cpu", [0], 1, None)
    assert not c.ok and c.action.startswith("set parallel.devices=null")


def test_run_preflight_checks_devices_against_monkeypatched_count(conf, monkeypatch, tmp_path):
    monkeypatch.setattr(preflight, "resolve_backend", lambda name: "cuda")
    monkeypatch.setattr(preflight, "probe_backend", lambda backend: (2, ""))
    bad = with_section(conf, "parallel", world_size=2, devices=[1, 1])
    c = failed(run_preflight(bad, tmp_path / "out"), "parallel.devices")
    assert "duplicate id(s) [1]" in c.current and "of 2 cuda device(s)" in c.current


def test_unusable_backend_fails_and_skips_device_check(conf, monkeypatch, tmp_path):
    monkeypatch.setattr(
        preflight, "probe_backend", lambda backend: (None, "torch sees no CUDA device")
    )
    checks = run_preflight(with_section(conf, "backend", name="cuda"), tmp_path / "out")
    c = failed(checks, "backend")
    assert "no CUDA device" in c.current and "backend=cpu" in c.action
    assert "parallel.devices" not in [x.item for x in checks]


# --- output root and disk --------------------------------------------------------------------


def test_missing_output_root_passes_when_creatable_and_is_not_created(tmp_path):
    root = tmp_path / "results" / "root"
    c = check_output_root(root)
    assert c.ok, c.line()
    assert f"to be created in {tmp_path}" in c.current
    assert list(tmp_path.iterdir()) == []  # the probe folder is gone too


def test_output_root_that_cannot_be_created_fails_naming_the_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    c = check_output_root(blocker / "out")
    assert not c.ok and "cannot be created" in c.current and "hydra.run.dir=" in c.action


def test_symlinked_output_root_fails(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    c = check_output_root(link)
    assert not c.ok and "is a symlink" in c.current and "remove the symlink" in c.action


def test_group_writable_output_root_fails(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o770)
    c = check_output_root(root)
    assert not c.ok and "mode 0770" in c.current
    assert c.action == f"run chmod go-w {root}"


def test_output_root_of_another_user_fails(tmp_path, monkeypatch):
    root = tmp_path / "theirs"
    root.mkdir(mode=0o700)
    monkeypatch.setattr(preflight.os, "getuid", lambda: root.stat().st_uid + 1)
    c = check_output_root(root)
    assert not c.ok and "owned by uid" in c.current and "chown" in c.action


def test_too_little_free_disk_fails(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    half_gib = 2**29
    monkeypatch.setattr(
        preflight.shutil,
        "disk_usage",
        lambda p: usage(100 * 2**30, 100 * 2**30 - half_gib, half_gib),
    )
    c = check_disk(tmp_path / "not-yet", min_free_gib=1.0)
    assert not c.ok
    assert c.current == f"0.5 GiB free at {tmp_path}" and c.required == ">= 1 GiB"
    assert check_disk(tmp_path, min_free_gib=0.25).ok


# --- assets ----------------------------------------------------------------------------------


def test_tampered_asset_fails_naming_the_file(conf, tmp_path):
    assets = tmp_path / "assets"
    shutil.copytree(REPO_ASSETS, assets)
    with (assets / "words" / "wordle_words.txt").open("a") as fh:
        fh.write("zzzzz\n")
    (assets / "qwen3_tiny" / "generation_config.json").unlink()
    tampered = with_section(
        conf, "model", manifest=str(assets / "assets.sha256"), path=str(assets / "qwen3_tiny")
    )
    checks = run_preflight(tampered, tmp_path / "out")
    c = failed(checks, "model.manifest")
    assert c.current.startswith("2 problem(s)")
    assert "sha256 mismatch: words/wordle_words.txt" in c.current
    assert "missing: qwen3_tiny/generation_config.json" in c.current
    assert "python -m afbench.assets build" in c.action
    assert sum(not x.ok for x in checks) == 1, "\n".join(x.line() for x in checks)


def test_model_folder_without_config_json_fails(conf, tmp_path):
    (tmp_path / "model").mkdir()
    checks = run_preflight(
        with_section(conf, "model", path=str(tmp_path / "model"), manifest=None), tmp_path / "out"
    )
    c = failed(checks, "model.path")
    assert "config.json not found" in c.current
    assert c.action == "set model.path=/abs/path/to/hf_model_folder"


def test_missing_data_and_prompts_file_fail(conf, tmp_path):
    no_data = with_section(conf, "data", path=str(tmp_path / "no.parquet"))
    c = failed(preflight.check_assets(no_data), "data.path")
    assert c.action == "set data.path=/abs/path/to/file.parquet"
    infer = conf.model_copy(update={"scheduler": InferScheduler()})
    infer = with_section(infer, "data", prompts_file=str(tmp_path / "prompts.jsonl"))
    c = failed(preflight.check_assets(infer), "data.prompts_file")
    assert c.action == "set data.prompts_file=/abs/path/to/prompts.jsonl"


# --- CANN ------------------------------------------------------------------------------------


def test_complete_cann_tree_passes_and_reports_dates(tmp_path):
    root = fake_cann(tmp_path / "cann", {"OPP": "20260716"})
    (root / CANN_COMPONENTS["HCCL"]).write_text("version=9.0.0\nbuild = 20260720.rc1\n")
    assert check_cann_layout(root).ok
    checks = check_cann_dates(root, "20260715")
    assert [c.item for c in checks] == [
        "CANN Toolkit",
        "CANN AutoFuse",
        "CANN Runtime",
        "CANN HCCL",
        "CANN OPP",
    ]
    assert all(c.ok for c in checks), [c.line() for c in checks]
    assert cann_build_dates(root) == {
        "Toolkit": "20260801",
        "AutoFuse": "20260801",
        "Runtime": "20260801",
        "HCCL": "20260720",
        "OPP": "20260716",
    }


def test_cann_tree_without_opp_fails(tmp_path):
    root = fake_cann(tmp_path / "cann")
    shutil.rmtree(root / "opp")
    c = check_cann_layout(root)
    assert not c.ok and "lacks opp/" in c.current and "backend.cann_root" in c.action


def test_unset_cann_root_names_the_yaml_key(monkeypatch):
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    c = check_cann_layout(*find_cann_root(None))
    assert not c.ok and c.action == "set backend.cann_root=/usr/local/Ascend/ascend-toolkit/latest"
    from_env = find_cann_root(None, {"ASCEND_HOME_PATH": "/opt/cann"})
    assert from_env == ("/opt/cann", "$ASCEND_HOME_PATH")
    assert find_cann_root("/x", {"ASCEND_TOOLKIT_HOME": "/y"}) == ("/x", "backend.cann_root")


def test_component_built_before_minimum_fails(tmp_path):
    root = fake_cann(tmp_path / "cann", {"AutoFuse": "20260714_235959"})
    checks = {c.item: c for c in check_cann_dates(root, "20260715")}
    c = checks["CANN AutoFuse"]
    assert not c.ok and c.current == "20260714 (share/info/graph_autofusion/version.info)"
    assert c.required == "build date >= 20260715" and "backend.cann_root" in c.action
    assert sum(not x.ok for x in checks.values()) == 1


def test_missing_or_dateless_version_file_fails(tmp_path):
    root = fake_cann(tmp_path / "cann")
    (root / CANN_COMPONENTS["Runtime"]).unlink()
    (root / CANN_COMPONENTS["OPP"]).write_text("Version=9.0.0\ntimestamp=19990101\n")
    checks = {c.item: c for c in check_cann_dates(root)}
    assert not checks["CANN Runtime"].ok and checks["CANN Runtime"].current.endswith("missing")
    assert not checks["CANN OPP"].ok and "no timestamp=/build= date" in checks["CANN OPP"].current
    assert cann_build_dates(root)["Runtime"] is None


def test_build_date_must_be_a_real_date(tmp_path):
    f = tmp_path / "version.info"
    f.write_text("timestamp=20261399\nbuild=20260102_0000\n")
    assert read_build_date(f) == "20260102"
    with pytest.raises(ValueError):
        check_cann_dates(tmp_path, "2026-07-15")


def test_absent_npu_smi_fails_with_action(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    (c,) = check_npu_smi()
    assert c.item == "npu-smi" and not c.ok and "/usr/local/Ascend/driver/tools" in c.action


def test_npu_smi_runs_both_commands_as_argv(tmp_path, monkeypatch):
    exe = fake_npu_smi(tmp_path / "bin", fail_on_m=True)
    monkeypatch.setenv("PATH", str(exe.parent))
    calls = []

    def runner(argv, **kw):
        calls.append(argv)
        return subprocess.run(argv, **kw)

    ok, bad = check_npu_smi(timeout_s=10, runner=runner)
    assert calls == [[str(exe), "info"], [str(exe), "info", "-m"]]
    assert ok.ok and ok.item == "npu-smi info"
    assert not bad.ok and bad.item == "npu-smi info -m"
    assert bad.current == "exit status 1: dcmi module initialize failed"


def test_npu_run_adds_cann_checks(conf, monkeypatch, tmp_path):
    monkeypatch.setattr(preflight, "resolve_backend", lambda name: "npu")
    monkeypatch.setattr(preflight, "probe_backend", lambda backend: (8, ""))
    monkeypatch.setenv("PATH", str(fake_npu_smi(tmp_path / "bin").parent))
    root = fake_cann(tmp_path / "cann", {"Toolkit": "20260101"})
    npu = with_section(conf, "backend", name="npu", cann_root=str(root))
    checks = run_preflight(npu, tmp_path / "out")
    by_item = {c.item: c for c in checks}
    assert by_item["CANN root"].ok and by_item["npu-smi info"].ok and by_item["npu-smi info -m"].ok
    assert not by_item["CANN Toolkit"].ok and by_item["CANN OPP"].ok
    assert by_item["parallel.devices"].ok


# --- the whole preflight on this machine -----------------------------------------------------


def test_default_config_passes_on_this_machine(conf, tmp_path):
    checks = run_preflight(conf, tmp_path / "out")
    assert all(c.ok for c in checks), "\n".join(c.line() for c in checks)
    items = [c.item for c in checks]
    assert items[:3] == ["platform", "python", "torch"]
    expected = {"backend", "output root", "free disk", "model.manifest", "model.path", "data.path"}
    assert expected <= set(items)
    assert not (tmp_path / "out").exists()  # checked, not made: the run makes it


# --- data file format and schema (issue 23) ------------------------------------------------


def _check_data(compose_cfg, path, *overrides):
    return preflight.check_data(validate_config(compose_cfg(f"data.path={path}", *overrides)))


def test_a_data_file_that_is_not_parquet_fails_naming_the_file(compose_cfg, tmp_path):
    bad = tmp_path / "train.parquet"
    bad.write_text("prompt,completion\nhi,there\n")  # a CSV under a parquet name
    c = _check_data(compose_cfg, bad)
    assert not c.ok and c.item == "data.path"
    assert c.current.startswith(f"{bad} is not a parquet file")
    assert "'messages' or 'prompt' + 'completion'" in c.required


def test_a_parquet_without_the_chat_columns_fails_listing_its_columns(compose_cfg, tmp_path):
    import pandas as pd

    path = tmp_path / "other.parquet"
    pd.DataFrame({"text": ["a"], "label": [1]}).to_parquet(path)
    c = _check_data(compose_cfg, path)
    assert not c.ok and c.current == f"{path} has columns ['label', 'text']"


def test_the_shipped_data_passes_and_the_command_engine_reads_its_own_format(compose_cfg, tmp_path):
    assert _check_data(
        compose_cfg, REPO_ASSETS / "wordle_sample/data/train-00000-of-00001.parquet"
    ).ok
    own = tmp_path / "corpus.bin"
    own.write_bytes(b"\0\1")
    assert _check_data(compose_cfg, own, "engine=command", "engine.executable=/bin/true").ok
