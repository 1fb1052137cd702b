"""No secret is stored in clear (issue 33): a database password in ``history.url`` and the
values of ``*_TOKEN`` / ``*_KEY`` / ``*PASSWORD*`` / ``*SECRET*`` variables of ``launcher.env``
and ``engine.env`` appear in no file of an output directory or sweep folder (afbench's files,
Hydra's ``.hydra/`` copies, ``multirun.yaml``, cli.log), scanned byte by byte, while the run's
command still sees the real values."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from afbench.config.secrets import MASK, MaskingFilter, mask_text, masked, unmask_env

STORED = Path(__file__).parent / "fixtures" / "results"
SECRETS = {
    "history": "PW-s3cret-1",
    "HF_TOKEN": "hf_s3cret-2",
    "AWS_SECRET_ACCESS_KEY": "sk-s3cret-3",
    "DB_PASSWORD_FILE": "pf-s3cret-4",
    "API_KEY": "key-s3cret-5",
}
OVERRIDES = [
    f'history.url="postgresql://bob:{SECRETS["history"]}@127.0.0.1:1/afb"',
    "history.record=false",
    f"+launcher.env.HF_TOKEN={SECRETS['HF_TOKEN']}",
    f"+launcher.env.API_KEY={SECRETS['API_KEY']}",
    "+launcher.env.PLAIN_SETTING=visible-value",
    f"+engine.env.AWS_SECRET_ACCESS_KEY={SECRETS['AWS_SECRET_ACCESS_KEY']}",
    f"+engine.env.DB_PASSWORD_FILE={SECRETS['DB_PASSWORD_FILE']}",
]
NAMES = ("HF_TOKEN", "API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD_FILE", "PLAIN_SETTING")


def afbench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "afbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "AFBENCH_RECIPE_PATH": str(STORED / "recipes")},
    )


def holding_a_secret(folder: Path) -> list[str]:
    """``path: secret`` for every file under ``folder`` whose bytes hold a secret value."""
    return [
        f"{p}: {name}"
        for p in folder.rglob("*")
        if p.is_file()
        for name, value in SECRETS.items()
        if value.encode() in p.read_bytes()
    ]


def test_no_file_of_an_output_directory_holds_a_secret_and_the_run_gets_them(tmp_path):
    seen = tmp_path / "seen.txt"  # outside the output directory: what the command saw
    spy = tmp_path / "spy.py"
    spy.write_text(
        "import os, runpy, sys\n"
        f"with open({str(seen)!r}, 'a') as f:\n"
        f"    f.write(' '.join(f'{{k}}={{os.environ.get(k)}}' for k in {NAMES!r}) + '\\n')\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = afbench(
        cwd,
        "experiment=fixture_results",
        "engine=command",
        f"engine.executable={sys.executable}",
        f"engine.args=['{spy}','{STORED / 'worker.py'}']",
        "preflight.min_free_gib=0",
        "verdict.rounds=1",
        *OVERRIDES,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the recipe's planted failure
    (out,) = (cwd / "outputs").glob("*/*")
    assert (out / "summary.json").is_file() and len(list(out.glob("runs/*/runspec.json"))) == 8
    assert holding_a_secret(out) == []
    # masked, not dropped: the reader still sees which variables were set
    hydra_overrides = (out / ".hydra" / "overrides.yaml").read_text()
    assert f"+launcher.env.HF_TOKEN={MASK}" in hydra_overrides
    assert f"postgresql://bob:{MASK}@127.0.0.1:1/afb" in hydra_overrides
    assert (
        f"AWS_SECRET_ACCESS_KEY: '{MASK}'" in (out / ".hydra" / "config.yaml").read_text()
        or f"AWS_SECRET_ACCESS_KEY: {MASK}" in (out / ".hydra" / "config.yaml").read_text()
    )
    assert "visible-value" in (out / "experiment.json").read_text()
    # every run's command got the real values (7 commands: one variant fails before it)
    lines = seen.read_text().splitlines()
    assert len(lines) >= 6
    assert set(lines) == {" ".join(f"{k}={SECRETS.get(k, 'visible-value')}" for k in NAMES)}


def test_no_file_of_a_sweep_folder_holds_a_secret_not_even_a_failed_jobs_log(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    # a preflight that fails: the job's error line quotes the job's overrides in its cli.log
    proc = afbench(
        cwd,
        "-m",
        "engine=command",
        "engine.executable=/bin/true",
        "preflight.min_free_gib=1000000,2000000",
        *OVERRIDES,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (sweep,) = (cwd / "multirun").glob("*/*")
    assert (sweep / "multirun.yaml").is_file() and (sweep / "sweep_summary.json").is_file()
    assert holding_a_secret(sweep) == []
    assert f"HF_TOKEN={MASK}" in (sweep / "0" / "cli.log").read_text()  # the job's error line
    assert f"+launcher.env.HF_TOKEN={MASK}" in (sweep / "multirun.yaml").read_text()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("- +launcher.env.HF_TOKEN=abc", f"- +launcher.env.HF_TOKEN={MASK}"),
        ("a=1,+engine.env.MY_PASSWORD_X=p@ss,b=2", f"a=1,+engine.env.MY_PASSWORD_X={MASK},b=2"),
        ("    AWS_SECRET_ACCESS_KEY: abc", f"    AWS_SECRET_ACCESS_KEY: {MASK}"),
        ('"API_KEY": "abc def"', f'"API_KEY": "{MASK}"'),
        ("HF_TOKEN: 'abc'", f"HF_TOKEN: '{MASK}'"),
        ("url: postgresql://bob:pw@db:5432/x", f"url: postgresql://bob:{MASK}@db:5432/x"),
        ("mysql://:pw@db/x", f"mysql://:{MASK}@db/x"),
        # not secrets: a name that only starts like one, lower-case keys, a URL without password
        ("HF_TOKEN_PATH=/data/tok", "HF_TOKEN_PATH=/data/tok"),
        ("sort_key=3 max_new_tokens: 8", "sort_key=3 max_new_tokens: 8"),
        ("postgresql://bob@db/x", "postgresql://bob@db/x"),
    ],
)
def test_mask_text(text, expected):
    assert mask_text(text) == expected


def test_masked_json_keeps_the_shape_and_the_worker_gets_the_values_back():
    env = {"HF_TOKEN": "t", "OMP_NUM_THREADS": "4"}
    data = {"config": {"launcher": {"env": env}, "history": {"url": "pg://u:p@h/d"}}, "n": [1]}
    out = masked(data)
    assert out == {
        "config": {
            "launcher": {"env": {"HF_TOKEN": MASK, "OMP_NUM_THREADS": "4"}},
            "history": {"url": f"pg://u:{MASK}@h/d"},
        },
        "n": [1],
    }
    assert data["config"]["launcher"]["env"]["HF_TOKEN"] == "t"  # a copy
    stored = out["config"]["launcher"]["env"]
    assert unmask_env(stored, {"HF_TOKEN": "t"}) == env
    assert unmask_env(stored, {}) == stored  # nothing to take it from: stays masked


def test_the_log_filter_masks_a_secret_in_a_formatted_record(tmp_path):
    handler = logging.FileHandler(tmp_path / "cli.log")
    handler.addFilter(MaskingFilter())
    log = logging.getLogger("afbench.test_secrets")
    log.addHandler(handler)
    try:
        log.error("afbench: error in %s: %s", "job 0 (+launcher.env.HF_TOKEN=abc123)", "boom")
    finally:
        log.removeHandler(handler)
        handler.close()
    assert (
        tmp_path / "cli.log"
    ).read_text() == f"afbench: error in job 0 (+launcher.env.HF_TOKEN={MASK}): boom\n"
