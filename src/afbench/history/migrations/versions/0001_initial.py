"""The initial history schema: experiments, records, runs, calibration.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("out_dir", sa.String(1024), nullable=False, unique=True),
        sa.Column("experiment", sa.String(200), nullable=False, index=True),
        sa.Column("created_at", sa.DateTime, nullable=False, index=True),
        sa.Column("recorded_at", sa.DateTime, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("baseline", sa.String(200)),
        sa.Column("verdict_phase", sa.String(100)),
        sa.Column("repeats", sa.String(16)),
        sa.Column("sweep_dir", sa.String(1024)),
        sa.Column("job", sa.String(64)),
        sa.Column("n_runs", sa.Integer),
        sa.Column("n_failed", sa.Integer),
        sa.Column("afbench_version", sa.String(64)),
        sa.Column("git_commit", sa.String(80)),
        sa.Column("versions", sa.JSON),
        sa.Column("cann", sa.JSON),
        sa.Column("backend", sa.String(16)),
        sa.Column("device", sa.String(200)),
        sa.Column("host_id", sa.String(16), index=True),
        sa.Column("hostname", sa.String(255)),
        sa.Column("cpu_model", sa.String(255)),
        sa.Column("accelerator", sa.String(255)),
        sa.Column("driver", sa.String(100)),
    )
    op.create_table(
        "records",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("variant", sa.String(200), nullable=False, index=True),
        sa.Column("is_baseline", sa.Boolean, nullable=False),
        sa.Column("config_hash", sa.String(64), index=True),
        sa.Column("switches", sa.JSON),
        sa.Column("report_path", sa.String(1024)),
        sa.Column("verdict", sa.String(100)),
        sa.Column("decision", sa.String(32)),
        sa.Column("gain_pct", sa.Float),
        sa.Column("ci_low_pct", sa.Float),
        sa.Column("ci_high_pct", sa.Float),
        sa.Column("level", sa.Float),
        sa.Column("n_pairs", sa.Integer),
        sa.Column("mde_pct", sa.Float),
        sa.Column("method", sa.Text),
        sa.Column("kind", sa.String(32)),
        sa.Column("median_step_s", sa.Float),
        sa.Column("mean_step_s", sa.Float),
        sa.Column("n_steps", sa.Integer),
        sa.Column("n_runs_ok", sa.Integer),
        sa.Column("peak_memory_gib", sa.Float),
        sa.Column("memory_measure", sa.String(16)),
        sa.Column("tflops_per_device", sa.Float),
        sa.Column("mfu_pct", sa.Float),
        sa.Column("tokens_per_s", sa.Float),
        sa.UniqueConstraint("experiment_id", "variant", name="uq_records_experiment_variant"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "record_id",
            sa.Integer,
            sa.ForeignKey("records.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("run_id", sa.String(300), nullable=False),
        sa.Column("repeat", sa.Integer),
        sa.Column("status", sa.String(16)),
        sa.Column("median_step_s", sa.Float),
        sa.Column("mean_step_s", sa.Float),
        sa.Column("n_steps", sa.Integer),
        sa.Column("step_times_s", sa.JSON),
        sa.Column("contention", sa.JSON),
        sa.UniqueConstraint("record_id", "run_id", name="uq_runs_record_run"),
    )
    op.create_table(
        "calibration",
        sa.Column("host_id", sa.String(16), primary_key=True),
        sa.Column("run_kind", sa.String(100), primary_key=True),
        sa.Column("spread_pct", sa.Float),
        sa.Column("n", sa.Integer),
        sa.Column("data", sa.JSON),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    for table in ("calibration", "runs", "records", "experiments"):
        op.drop_table(table)
