"""Slurm batch script: ``#SBATCH`` geometry (one task per node, all its GPUs), the rendezvous host
taken from the allocation (``scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1``), and
``srun`` starting one ``torchrun`` per node. An image, when given, uses the pyxis/enroot plugin's
``srun --container-image``. Written for Slurm 24.x/25.x sbatch/srun options (``--nodes``,
``--ntasks-per-node``, ``--gpus-per-node``, ``--partition``, ``--time``, ``--exclusive``,
``--kill-on-bad-exit``)."""

from __future__ import annotations

import shlex

from planner.specs import Plan

from .base import Exporter, Notes, comment_block, env_exports, geometry, header_lines
from .options import ExportOptions
from .torchrun import shell_join, torchrun_words


class SlurmExporter(Exporter):
    id = "slurm"
    target = "Slurm sbatch + srun + torchrun"
    target_version = "Slurm 24.05+ (sbatch/srun), torch 2.13 torchrun"
    media_type = "text/x-shellscript"
    extension = "sbatch"
    runs_command = True  # --command replaces meshplan's runtime

    def render(self, plan: Plan, options: ExportOptions, notes: Notes) -> str:
        geom = geometry(plan, options)
        sbatch = [
            f"--job-name={options.job_name}",
            f"--nodes={geom.nnodes}",
            "--ntasks-per-node=1",
            f"--gpus-per-node={geom.nproc_per_node}",
            "--exclusive",
        ]
        if options.partition:
            sbatch.append(f"--partition={options.partition}")
        if options.time_limit:
            sbatch.append(f"--time={options.time_limit}")
        if options.rdzv_endpoint is not None:
            notes.note(
                "rdzv_endpoint is ignored by the Slurm target: the first node of the allocation hosts the rendezvous"
            )
        words = torchrun_words(geom, options, '"$MASTER_ADDR:$MASTER_PORT"', '"$SLURM_JOB_ID"')
        raw = {i + 1 for i, w in enumerate(words) if w in ("--rdzv-endpoint", "--rdzv-id")}
        if geom.multi_node:
            words[words.index("--nnodes") + 1] = '"$SLURM_NNODES"'
            raw.add(words.index("--nnodes") + 1)
        srun = ["srun", "--kill-on-bad-exit=1"]
        if options.image:
            srun.append(f"--container-image={options.image}")
        words = srun + words + options.program_args()
        raw = frozenset(i + len(srun) for i in raw)
        lines = ["#!/bin/bash"] + [f"#SBATCH {s}" for s in sbatch]
        head = comment_block(
            "#",
            header_lines(plan, self) + ["Submit with: sbatch " + (notes.out_name or self.filename(plan, options))],
            notes.warnings,
            notes.info,
        )
        body = (
            "set -euo pipefail\n\n"
            "# The first node of the allocation hosts the c10d rendezvous.\n"
            'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)\n'
            f"MASTER_PORT={shlex.quote(str(options.rdzv_port))}\n"
            "export MASTER_ADDR MASTER_PORT\n\n"
            + env_exports(plan, options.plan_path)
            + "\n"
            + shell_join(words, raw)
            + "\n"
        )
        return "\n".join(lines) + "\n" + head + body
