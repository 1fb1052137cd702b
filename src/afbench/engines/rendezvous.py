"""torchrun's rendezvous for one run: one node (``--standalone``) or several (``parallel.nnodes``).

One node: ``--standalone`` (a local c10d rendezvous on a free port). Several: one torchrun
agent per node, all started by ``srun`` over the SLURM allocation afbench runs in (one task
per node), joining one rendezvous (torchrun docs, "Elastic Launch": ``--nnodes``,
``--rdzv-backend``, ``--rdzv-endpoint``, ``--rdzv-id``). The c10d rendezvous gives each agent
its node rank and each process its global ``RANK``; the process of global rank 0 writes the
run's metrics and step log, the others ``rank<r>.log`` in the run folder, so the run folder
must be on a filesystem every node sees (the usual shared home or project folder).

The endpoint defaults to this host (the node afbench runs on, one of the allocation's) and
a port free here; the id to the run's own. Nothing here imports torch: the launcher builds
the command line in afbench's own process.
"""

from __future__ import annotations

import socket
from typing import Any

#: The command that starts one agent per node: srun over the allocation, one task per node;
#: ``--overlap`` lets it share the node with the step afbench itself runs in (a job of
#: Hydra's submitit launcher is one); ``--kill-on-bad-exit`` ends every node's agent when
#: one fails.
SRUN = (
    "srun",
    "--nodes={nnodes}",
    "--ntasks={nnodes}",
    "--ntasks-per-node=1",
    "--kill-on-bad-exit=1",
    "--overlap",
)


def free_port(host: str = "") -> int:
    """A TCP port free on this host now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def torchrun_args(parallel: Any, run_id: str) -> list[str]:
    """torchrun's options for the processes and rendezvous of one run.

    ``parallel``: the run's ``parallel`` section (``world_size``, ``nnodes``, ``rdzv_*``);
    ``run_id``: the default rendezvous id. One node: ``--standalone --nproc_per_node=W``.
    N nodes: ``--nnodes=N --nproc_per_node=W/N --rdzv_backend=B --rdzv_endpoint=H:P
    --rdzv_id=I``, where ``H:P`` is ``parallel.rdzv_endpoint`` or this host's name and a
    port free here (:func:`free_port`).
    """
    if parallel.nnodes == 1:
        return ["--standalone", f"--nproc_per_node={parallel.world_size}"]
    endpoint = parallel.rdzv_endpoint or f"{socket.gethostname()}:{free_port()}"
    return [
        f"--nnodes={parallel.nnodes}",
        f"--nproc_per_node={parallel.per_node}",
        f"--rdzv_backend={parallel.rdzv_backend}",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_id={parallel.rdzv_id or run_id}",
    ]


def node_launch(parallel: Any) -> list[str]:
    """The argv prefix that runs a command once per node: ``srun ...`` (:data:`SRUN`) for
    ``parallel.nnodes`` > 1, nothing for one node."""
    if parallel.nnodes == 1:
        return []
    return [a.format(nnodes=parallel.nnodes) for a in SRUN]
