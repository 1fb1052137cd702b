"""The file names of an output directory and a sweep folder (a module of plain strings: every
part of the store and its writers name files through it)."""

from pathlib import Path

PLAN = "plan.json"
EXPERIMENT = "experiment.json"
SUMMARY = "summary.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
RUNS = "runs"
RUNSPEC = "runspec.json"
STATUS = "status.json"
RESULT = "result.json"
STDOUT_LOG = "stdout.log"
CONFIG_YAML = "config.yaml"  # a run's resolved config, for the person reading the folder
METRICS = "metrics.jsonl"
SWEEP_SUMMARY = "sweep_summary.json"
MULTIRUN_YAML = "multirun.yaml"  # Hydra writes it into every sweep folder
HYDRA_OVERRIDES = Path(".hydra") / "overrides.yaml"  # a Hydra job's command-line overrides
