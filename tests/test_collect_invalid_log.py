"""An invalid step log yields no statistics for its run (issue 10, item 5): no mean step
time, no spread, no mean loss, no tokens/s; the log error names the duplicated step."""

from __future__ import annotations

import json

from afbench.collect import collect
from afbench.config import validate_config
from afbench.io import write_json_atomic
from afbench.plan import make_plan


def _titan(step: int, seconds: float) -> str:
    return (
        f"[titan] 2025-11-29 11:00:00,000 - root - INFO - step: {step:2}  loss:  2.31000  "
        f"elapsed_time_per_step: {seconds:.3f}s"
    )


def _write_run(run_dir, lines, records):
    # an OK status as a launcher before the strict parse at the run's end wrote it
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "run_id": run_dir.name,
                "status": "OK",
                "exit_code": 0,
                "config_hash": "0" * 64,
            }
        )
    )
    (run_dir / "stdout.log").write_text("\n".join(lines) + "\n")
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"kind": "step", **r}) + "\n" for r in records)
    )


def test_rank_duplicated_log_gives_no_statistics_while_a_valid_one_does(compose_cfg, tmp_path):
    plan = make_plan(validate_config(compose_cfg("experiment=sft_af_compare")), tmp_path)
    write_json_atomic(tmp_path / "plan.json", plan.model_dump(mode="json"))
    records = [
        {"step": s, "step_time_s": 0.28 + s / 1000, "loss": 2.3, "tokens": 1024}
        for s in range(1, 11)
    ]
    off, on = plan.runs[0], plan.runs[1]
    # two ranks printing every step line, no rank prefix
    _write_run(
        tmp_path / "runs" / off.run_id,
        [line for s in range(1, 11) for line in (_titan(s, 0.28), _titan(s, 0.29))],
        records,
    )
    _write_run(tmp_path / "runs" / on.run_id, [_titan(s, 0.25) for s in range(1, 11)], records)

    runs = collect(tmp_path).runs.set_index("run_id")
    bad, good = runs.loc[off.run_id], runs.loc[on.run_id]
    assert "step 6 is duplicated (2 times" in bad["log_error"]
    assert "several ranks are logging" in bad["log_error"]
    for key in ("mean_step_s", "loss", "tokens_per_s", "step_cv_pct"):
        assert bad[key] is None or bad[key] != bad[key], key  # None (or NaN in a float column)
        assert good[key] == good[key] and good[key] is not None, key


def test_torchrun_role_prefixes_are_rank_prefixes_in_the_strict_parser():
    # torchrun's tee prefix is [${role_name}${local_rank}]: ([default0]:), as the torchtitan
    # console parser already reads it; two ranks' merged lines keep rank 0's, not a duplicate
    from afbench.analysis.steplog import parse_step_times
    from afbench.engines.torchtitan.parsers import parse_titan_log

    for prefix in ("[rank{r}]:", "[default{r}]:", "[trainer{r}]:", "[{r}]:"):
        text = "\n".join(
            prefix.format(r=r) + _titan(s, 0.28 + r / 10) for s in range(1, 11) for r in (0, 1)
        )
        assert parse_step_times(text, 6, 10) == dict.fromkeys(range(6, 11), 0.28), prefix
        assert {rec["rank"] for rec in parse_titan_log(text)} == {0, 1}, prefix
