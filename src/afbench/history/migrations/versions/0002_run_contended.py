"""Each run's contention flag: ``runs.contended`` (issue 21 leftovers).

True when the run was measured as contended (:func:`afbench.analysis.contention.judge` of its
``result.json`` ``contention``, stored in ``runs.contention`` since 0001), False when measured
and not contended, NULL when not measured. Runs recorded before this revision are judged from
their stored ``contention`` record here, so ``history check`` sets them aside as well.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from afbench.analysis.contention import judge

    op.add_column("runs", sa.Column("contended", sa.Boolean, nullable=True))
    runs = sa.table(
        "runs",
        sa.column("id", sa.Integer),
        sa.column("contention", sa.JSON),
        sa.column("contended", sa.Boolean),
    )
    conn = op.get_bind()
    stored = conn.execute(
        sa.select(runs.c.id, runs.c.contention).where(runs.c.contention.is_not(None))
    ).all()
    for run_id, record in stored:
        contended = judge(record)[0] if isinstance(record, dict) else None
        if contended is not None:
            conn.execute(runs.update().where(runs.c.id == run_id).values(contended=bool(contended)))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("contended")
