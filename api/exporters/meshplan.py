"""meshplan's bundled runtime: ``meshplan run --plan plan.json --nproc-per-node N [--nnodes K]``
(``runtime/cli.py``), which starts torchrun on ``python -m runtime.train``. The runtime applies every
part of the plan itself (mesh, TP plan, stage split, schedule, recompute, ZeRO), so nothing is lost."""

from __future__ import annotations

from planner.specs import Plan

from .base import Exporter, Notes, comment_block, geometry, header_lines
from .torchrun import shell_join


class MeshplanExporter(Exporter):
    id = "meshplan"
    target = "meshplan runtime (meshplan run)"
    target_version = "meshplan 0.1 (runtime/cli.py)"
    media_type = "text/x-shellscript"
    extension = "sh"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        geom = geometry(plan, options)
        words = ["meshplan", "run", "--plan", options.plan_path, "--nproc-per-node", str(geom.nproc_per_node)]
        if geom.multi_node:
            words += ["--nnodes", str(geom.nnodes)]
        if options.command is not None:
            notes.note("--command is ignored by the meshplan target: it always runs meshplan's runtime")
        how = (f"Run on each of the {geom.nnodes} nodes (the runtime's torchrun rendezvous uses MASTER_ADDR)."
               if geom.multi_node else "Run on the one node.")
        head = comment_block("#", header_lines(plan, self) + [how], notes.warnings, notes.info)
        return "#!/usr/bin/env bash\n" + head + "set -euo pipefail\n\n" + shell_join(words) + "\n"
