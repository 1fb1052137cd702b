"""The history database's tables (SQLAlchemy Core), revision ``0002`` of the Alembic chain in
``migrations/versions/``. A change here is a new migration there and a new :data:`HEAD`.

experiments  one row per output directory (a single run, or one sweep job); unique ``out_dir``
records      one row per variant of an experiment: what ``history list`` prints and ``check``
             compares; unique (experiment, variant)
runs         one row per verdict-phase run of a record: status, measured step times, whether
             it was measured as contended
calibration  the host's run-to-run spread per run kind (issue 21 item 4: a hook, filled by
             the verdict's host calibration once it exists)

Times are UTC, stored naive. Seconds for step times, GiB for memory, percent for gains
(positive = faster, as :class:`afbench.store.Speed`).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

#: The Alembic revision these tables are; the database is upgraded to it on open.
HEAD = "0002"

metadata = MetaData()

experiments = Table(
    "experiments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("out_dir", String(1024), nullable=False, unique=True),
    Column("experiment", String(200), nullable=False, index=True),
    Column("created_at", DateTime, nullable=False, index=True),
    Column("recorded_at", DateTime, nullable=False),
    Column("source", String(16), nullable=False),  # live | import
    Column("baseline", String(200)),
    Column("verdict_phase", String(100)),
    Column("repeats", String(16)),
    Column("sweep_dir", String(1024)),
    Column("job", String(64)),
    Column("n_runs", Integer),
    Column("n_failed", Integer),
    Column("afbench_version", String(64)),
    Column("git_commit", String(80)),
    Column("versions", JSON),  # torch, torch_npu, transformers, cuda, ... (the runs' result.json)
    Column("cann", JSON),  # CANN component -> build date 20YYMMDD (npu)
    Column("backend", String(16)),
    Column("device", String(200)),
    Column("host_id", String(16), index=True),
    Column("hostname", String(255)),
    Column("cpu_model", String(255)),
    Column("accelerator", String(255)),
    Column("driver", String(100)),
)

records = Table(
    "records",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "experiment_id", Integer, ForeignKey("experiments.id", ondelete="CASCADE"), nullable=False
    ),
    Column("variant", String(200), nullable=False, index=True),
    Column("is_baseline", Boolean, nullable=False),
    Column("config_hash", String(64), index=True),
    Column("switches", JSON),  # optimization switch -> value, and the variant's overrides
    Column("report_path", String(1024)),
    Column("verdict", String(100)),
    Column("decision", String(32)),
    Column("gain_pct", Float),
    Column("ci_low_pct", Float),
    Column("ci_high_pct", Float),
    Column("level", Float),
    Column("n_pairs", Integer),
    Column("mde_pct", Float),
    Column("method", Text),
    Column("kind", String(32)),
    Column("median_step_s", Float),  # median of the runs' median step times
    Column("mean_step_s", Float),  # mean of every measured step
    Column("n_steps", Integer),
    Column("n_runs_ok", Integer),
    Column("peak_memory_gib", Float),
    Column("memory_measure", String(16)),
    Column("tflops_per_device", Float),
    Column("mfu_pct", Float),
    Column("tokens_per_s", Float),
    UniqueConstraint("experiment_id", "variant", name="uq_records_experiment_variant"),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "record_id",
        Integer,
        ForeignKey("records.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("run_id", String(300), nullable=False),
    Column("repeat", Integer),
    Column("status", String(16)),
    Column("median_step_s", Float),
    Column("mean_step_s", Float),
    Column("n_steps", Integer),
    Column("step_times_s", JSON),  # the measured window, in step order
    Column("contention", JSON),  # result.json "contention" when the run recorded one
    # afbench.analysis.contention.judge of it: True contended, False not, NULL not measured
    # (revision 0002); history check sets contended runs aside
    Column("contended", Boolean),
    UniqueConstraint("record_id", "run_id", name="uq_runs_record_run"),
)

calibration = Table(
    "calibration",
    metadata,
    Column("host_id", String(16), primary_key=True),
    Column("run_kind", String(100), primary_key=True),
    Column("spread_pct", Float),  # run-to-run spread of the log run statistic, percent
    Column("n", Integer),  # runs (or pairs) behind it
    Column("data", JSON),  # whatever else the calibration keeps
    Column("updated_at", DateTime, nullable=False),
)
