"""A received output directory is data (issue 33): re-rendering it never runs a template it
names, never writes through its symlinks out of it, and resuming from it never copies or reads
what its links point to. Each case plants the hostile file for real (a template that writes a
file when executed, real symlinks) and checks the disk afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import jinja2
import pytest

from afbench.report.__main__ import main as report_main

STORED = Path(__file__).parent / "fixtures" / "results"
#: a template that runs ``id`` into a file when a plain Jinja2 environment renders it
PLANT = '{{{{ self.__init__.__globals__.__builtins__.__import__("os").system("id > {}") }}}}\n'
TEMPLATES = ("report.md.j2", "report.html.j2", "sweep.md.j2", "sweep.html.j2", "verdict_words.j2")


def received(tmp_path: Path, name: str = "received") -> Path:
    copy = tmp_path / name
    shutil.copytree(STORED / "v2", copy)
    return copy


def plant_templates(folder: Path, marker: Path) -> Path:
    """A template folder whose every template writes ``marker`` when executed; checked here
    to do so in a plain environment (so a missing marker later means it did not run)."""
    folder.mkdir()
    for name in TEMPLATES:
        (folder / name).write_text(PLANT.format(marker), encoding="utf-8")
    jinja2.Environment(loader=jinja2.FileSystemLoader(folder)).get_template("report.md.j2").render()
    assert marker.is_file()
    marker.unlink()
    return folder


def store_template_dir(out_dir: Path, value: str) -> None:
    path = out_dir / "experiment.json"
    data = json.loads(path.read_text())
    data["config"]["report"]["template_dir"] = value
    path.write_text(json.dumps(data))


def files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_a_template_folder_named_in_experiment_json_is_never_rendered(
    tmp_path, monkeypatch, capsys, where
):
    copy = received(tmp_path)
    marker = tmp_path / "template-ran"
    plant_templates(copy / "tpl", marker)
    store_template_dir(copy, str(copy / "tpl") if where == "absolute" else "tpl")
    monkeypatch.chdir(copy)  # where the relative folder resolves
    assert report_main([str(copy)]) == 0
    assert not marker.exists()
    stored = str(copy / "tpl")  # a relative folder is named as it resolves (config LocalPath)
    assert capsys.readouterr().err.splitlines() == [
        f"afbench.report: note: experiment.json names report.template_dir {stored!r}; a "
        "re-render uses only the templates given with --template-dir"
    ]
    report = (copy / "report.md").read_text(encoding="utf-8")
    assert "fused vs plain" in report and "uid=" not in report  # the installed templates
    assert "uid=" not in (copy / "report.html").read_text(encoding="utf-8")


def test_a_template_folder_that_exists_only_on_the_senders_machine_does_not_stop_a_rerender(
    tmp_path, capsys
):
    # newcomer trial: /home/alice/my_tpl, named in a received experiment.json, exit 2
    copy = received(tmp_path)
    store_template_dir(copy, str(tmp_path / "no-such-folder-here"))
    assert report_main([str(copy)]) == 0
    assert "a re-render uses only the templates given with --template-dir" in (
        capsys.readouterr().err
    )
    assert "fused vs plain" in (copy / "report.md").read_text(encoding="utf-8")


def test_a_template_folder_given_on_the_command_line_renders_in_the_sandbox(tmp_path, capsys):
    copy = received(tmp_path)
    marker = tmp_path / "template-ran"
    tpl = plant_templates(tmp_path / "tpl", marker)
    before = (copy / "report.md").read_bytes()
    assert report_main([str(copy), "--template-dir", str(tpl)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the first template rendered: the verdict sentences'
    assert len(err) == 1 and err[0].startswith(
        "afbench.report: error: report.template_dir: verdict_words.j2: SecurityError: access "
        "to attribute '__init__'"
    ), err
    assert not marker.exists()
    assert (copy / "report.md").read_bytes() == before
    # the same inside a macro the report calls later
    (tpl / "verdict_words.j2").write_text(
        "{% macro verdict_line(c) %}"
        + PLANT.format(marker).replace("self.", "c.")
        + "{% endmacro %}{% macro headline(c) %}{% endmacro %}"
    )
    assert report_main([str(copy), "--template-dir", str(tpl)]) == 2
    assert (
        "verdict_words.j2: SecurityError: access to attribute '__init__' of 'Comparison'"
        in capsys.readouterr().err
    )
    assert not marker.exists()
    # a str.format field that walks past its argument is refused too (it reads os.environ)
    (tpl / "verdict_words.j2").unlink()
    (tpl / "report.md.j2").write_text('{{ "{n.__init__.__globals__}" | fill(n=s) }}\n')
    assert report_main([str(copy), "--template-dir", str(tpl)]) == 2
    assert "SecurityError: fill: field {n.__init__.__globals__}" in capsys.readouterr().err
    # the labels the installed templates fill their sentences from cannot be changed
    (tpl / "report.md.j2").write_text('{% set _ = L.update({"v_no_interval": "{x}"}) %}\n')
    assert report_main([str(copy), "--template-dir", str(tpl)]) == 2
    assert "SecurityError: access to attribute 'update' of 'dict'" in capsys.readouterr().err
    assert not marker.exists() and (copy / "report.md").read_bytes() == before


def test_a_users_own_templates_still_render_with_the_installed_ones_in_the_sandbox(
    tmp_path, capsys
):
    copy = received(tmp_path)
    tpl = tmp_path / "mine"
    tpl.mkdir()
    (tpl / "report.md.j2").write_text(
        "{% set v = verdict_words %}mine {{ s.experiment }}: {{ s.comparisons | length }} "
        "{{ '{n} rounds' | fill(n=2) }}\n{% for c in s.comparisons %}{{ c.verdict_line }}\n"
        "{% endfor %}",
        encoding="utf-8",
    )
    assert report_main([str(copy), "--template-dir", str(tpl)]) == 0, capsys.readouterr().err
    md = (copy / "report.md").read_text(encoding="utf-8").splitlines()
    assert md[0] == "mine fixture_results: 3 2 rounds"
    # the verdict line: the installed verdict_words.j2 (list.append and all), sandboxed
    assert md[1].startswith("FUSED_FASTER (95% CI [+7.82%, +33.93%], 2 rounds")
    # report.html: the installed template (its macros, list.append and all) in the sandbox
    assert "fused vs plain" in (copy / "report.html").read_text(encoding="utf-8")


def sweep_of_two(tmp_path: Path) -> Path:
    """A sweep folder whose two jobs are the stored experiment, swept over
    ``verdict.min_gain_pct`` (a key no verdict here depends on); the third value's job never
    ran (the sweep was stopped)."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(  # as Hydra writes it: the command line asked for 3
        "hydra:\n  mode: MULTIRUN\n  overrides:\n    task:\n    - engine=command\n"
        "    - verdict.min_gain_pct=2.0,3.0,4.0\n"
    )
    for job, value in (("0", "2.0"), ("1", "3.0")):
        folder = received(sweep, job)
        (folder / ".hydra").mkdir(exist_ok=True)
        (folder / ".hydra" / "overrides.yaml").write_text(f"- verdict.min_gain_pct={value}\n")
    return sweep


def test_a_sweep_rerender_never_renders_a_jobs_stored_template_folder(tmp_path, capsys):
    sweep = sweep_of_two(tmp_path)
    marker = tmp_path / "template-ran"
    plant_templates(tmp_path / "tpl", marker)
    for job in ("0", "1"):
        store_template_dir(sweep / job, str(tmp_path / "tpl"))
    # in another language every job's report is re-rendered too
    assert report_main([str(sweep), "--lang", "zh"]) == 0, capsys.readouterr().err
    assert not marker.exists()
    assert (sweep / "sweep_report.zh.md").is_file() and (sweep / "0" / "report.zh.html").is_file()
    assert "uid=" not in (sweep / "sweep_report.zh.md").read_text(encoding="utf-8")


def test_a_results_link_out_of_the_directory_is_refused_before_anything_is_written(
    tmp_path, capsys
):
    copy = received(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (copy / "results").symlink_to(outside)
    before = files(copy)
    assert report_main([str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"afbench.report: error: {copy}/results: a symlink leads it to {outside}, "
        f"outside {copy}; afbench writes nothing through links out of the directory "
        "it writes: remove the link"
    ]
    assert list(outside.iterdir()) == []
    assert files(copy) == before


def test_a_linked_file_is_replaced_never_written_through(tmp_path, capsys):
    copy = received(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (copy / "results").mkdir()
    for name in ("runs.csv", "steps.parquet"):
        (copy / "results" / name).symlink_to(victim)
    (copy / "report.md").unlink()
    (copy / "report.md").symlink_to(victim)
    assert report_main([str(copy)]) == 0, capsys.readouterr().err
    assert victim.read_text() == "keep me\n"
    for path in (
        copy / "results" / "runs.csv",
        copy / "results" / "steps.parquet",
        copy / "report.md",
    ):
        assert path.is_file() and not path.is_symlink()


def test_a_sweep_job_linked_out_of_the_sweep_folder_is_refused(tmp_path, capsys):
    sweep = sweep_of_two(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (sweep / "1").rename(elsewhere)
    (sweep / "1").symlink_to(elsewhere)
    before = files(elsewhere)
    assert report_main([str(sweep)]) == 2
    err = capsys.readouterr().err
    assert f"{sweep}/1: a symlink leads it to {elsewhere}, outside {sweep}" in err
    assert files(elsewhere) == before and not (sweep / "sweep_summary.json").exists()


@pytest.mark.parametrize("link", ["file", "folder", "run"])
def test_resume_refuses_a_run_holding_a_link_naming_it(tmp_path, link):
    from afbench.errors import ConfigError
    from afbench.store.resume import resume_index

    copy = received(tmp_path)
    run = copy / "runs" / "plain-train-r1"
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0\n")
    if link == "file":
        where, target = run / "notes.txt", secret
    elif link == "folder":
        (tmp_path / "big").mkdir()
        where, target = run / "cache", tmp_path / "big"
    else:
        shutil.move(run, tmp_path / "run-elsewhere")
        where, target = run, tmp_path / "run-elsewhere"
    where.symlink_to(target)
    with pytest.raises(ConfigError, match=rf"^resume: {where} is a symlink \(to {target}\)"):
        resume_index(copy)


def test_resume_from_a_directory_with_a_link_exits_2_and_copies_nothing(tmp_path):
    copy = received(tmp_path)
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0\n")
    link = copy / "runs" / "plain-train-r1" / "stdout.log"
    link.unlink()
    link.symlink_to(secret)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "experiment=fixture_results",
            "engine=command",
            f"engine.executable={sys.executable}",
            f"engine.args=['{STORED / 'worker.py'}']",
            "preflight.min_free_gib=0",
            "history.record=false",
            f"resume={copy}",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "AFBENCH_RECIPE_PATH": str(STORED / "recipes")},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"resume: {link} is a symlink (to {secret})" in proc.stderr
    assert "Traceback" not in proc.stderr
    copied = [p for p in cwd.rglob("*") if p.is_file() and p.read_bytes() == secret.read_bytes()]
    assert copied == [] and not list(cwd.rglob("runs/*/status.json"))


def test_a_summary_of_a_newer_afbench_is_refused_not_overwritten(tmp_path, capsys):
    copy = received(tmp_path)
    summary = json.loads((copy / "summary.json").read_text())
    (copy / "summary.json").write_text(json.dumps({**summary, "schema_version": 99}))
    before = files(copy)
    assert report_main([str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"afbench.report: error: {copy}/summary.json: schema_version 99 is not one this "
        "afbench reads"
    ), err
    assert files(copy) == before and not (copy / "results").exists()


def test_a_run_folder_that_lost_only_its_status_is_refused_as_a_missing_one(tmp_path, capsys):
    copy = received(tmp_path)
    (copy / "runs" / "fused-train-r1" / "status.json").unlink()
    before = files(copy)
    assert report_main([str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"afbench.report: error: {copy}/runs/fused-train-r1/status.json: missing, "
        "but summary.json records it as run; restore the folder (or re-run with "
        f"resume={copy}) — nothing was rewritten"
    ]
    assert files(copy) == before


@pytest.mark.parametrize("where", ["variants", "phases"])
def test_a_name_ending_in_a_newline_is_refused(where):
    from pydantic import ValidationError

    from afbench.config.models import ExperimentConfig

    names = {"variants": {"baseline": {}, "fast\n": {}}, "phases": {"run\n": {}}}
    with pytest.raises(ValidationError, match="must be letters, digits"):
        ExperimentConfig(**{where: names[where]})


def test_an_environment_name_ending_in_a_newline_is_refused():
    from pydantic import ValidationError

    from afbench.config.models import LauncherConfig

    with pytest.raises(ValidationError, match="must match"):
        LauncherConfig(env={"HF_HOME\n": "/data"})


def test_an_op_name_with_dollar_signs_is_drawn_as_it_is_not_as_mathtext():
    from afbench.report.plots import report_plots
    from afbench.report.render import labels
    from afbench.store import load_summary

    summary = load_summary(json.loads((STORED / "v2" / "summary.json").read_text()))
    names = ["aten::$\\frac{a}{$", "op_$x^2$_fused", "$$"]
    for row, name in zip(summary.kernels["plain"], names):
        row.op_type = name
    plots = report_plots(summary, None, labels("en"))
    assert plots["kernels_note"] == labels("en")["no_kernel_plot"]  # no plot failed
    svg = plots["kernels"]["plain"].svg
    for name in names:  # each drawn as its own characters (SVG text, fonts not embedded)
        assert name.replace("&", "&amp;").replace("<", "&lt;") in svg, name


def test_a_partial_sweep_report_names_the_combinations_that_never_ran(tmp_path, capsys):
    sweep = sweep_of_two(tmp_path)
    assert report_main([str(sweep)]) == 0, capsys.readouterr().err
    assert "verdict.min_gain_pct=4.0: never ran" in capsys.readouterr().out.splitlines()
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert summary["never_ran"] == ["verdict.min_gain_pct=4.0"] and summary["jobs"] == 2
    never = "Never ran (the sweep stopped before them, or their job folders are gone): "
    assert f"{never}`verdict.min_gain_pct=4.0`" in (sweep / "sweep_report.md").read_text()
    assert (
        f"{never}<code>verdict.min_gain_pct=4.0</code>" in (sweep / "sweep_report.html").read_text()
    )


def test_the_history_page_renders_stored_text_as_text_not_as_a_template(tmp_path):
    from afbench.history.__main__ import main as history_main
    from test_history import T0, _write_all, planted

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    name = "{{ 7 * 7 }}{% include 'x' %}"  # an experiment name as an imported record holds it
    _write_all(url, *[planted(name, T0 + timedelta(hours=k), 1.0, k) for k in range(3)])
    out = tmp_path / "history.html"
    assert history_main(["--url", url, "report", "-o", str(out)]) == 0
    for page in (out, out.with_suffix(".md")):
        text = page.read_text(encoding="utf-8")
        assert "{{ 7 * 7 }}{% include " in text, page  # as stored: never compiled
