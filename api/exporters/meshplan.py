"""meshplan's bundled runtime: ``meshplan run --plan plan.json --nproc-per-node N`` on one node, plus
``--nnodes K --rdzv-endpoint host:port`` (required by the runtime across nodes; c10d rendezvous) on
each of several (``runtime/cli.py``); it starts torchrun on ``python -m runtime.train``. The runtime applies every
part of the plan itself (mesh, TP plan, stage split, schedule, recompute, ZeRO, context and expert parallelism), so
nothing is lost; ``runtime.validate`` refuses what it does not run (e.g. a mixture of experts with etp > 1)."""

from __future__ import annotations

from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.stack_rules import precision_error, unbuilt_parts
from planner.specs.stacks import STACKS

from .base import Exporter, Notes, comment_block, geometry, header_lines, refuse_recompute_modules
from .torchrun import rdzv_endpoint, shell_join


class MeshplanExporter(Exporter):
    id = "meshplan"
    target = "meshplan runtime (meshplan run)"
    target_version = "meshplan 0.1 (runtime/cli.py `meshplan run`)"
    media_type = "text/x-shellscript"
    extension = "sh"

    def render(self, plan: Plan, options, notes: Notes) -> str:
        check_buildable(plan)
        geom = geometry(plan, options)
        words = ["meshplan", "run", "--plan", options.plan_path, "--nproc-per-node", str(geom.nproc_per_node)]
        raw: frozenset[int] = frozenset()
        if geom.multi_node:
            endpoint = rdzv_endpoint(options, "${MASTER_ADDR:?set MASTER_ADDR to the first node address}")
            words += [
                "--nnodes",
                str(geom.nnodes),
                "--rdzv-endpoint",
                f'"{endpoint}"' if options.rdzv_endpoint is None else endpoint,
            ]
            raw = frozenset({len(words) - 1})
        if options.command is not None:
            notes.note("--command is ignored by the meshplan target: it always runs meshplan's runtime")
        how = (
            f"Run this same script on each of the {geom.nnodes} nodes (MASTER_ADDR = the first node's address)."
            if geom.multi_node
            else "Run on the one node."
        )
        usage = "Add --steps N (default 10), --data tokens.bin, --report run.json … as needed (meshplan run --help)."
        head = comment_block("#", header_lines(plan, self) + [how, usage], notes.warnings, notes.info)
        return "#!/usr/bin/env bash\n" + head + "set -euo pipefail\n\n" + shell_join(words, raw) + "\n"


def check_buildable(plan: Plan) -> None:
    """A model as the runtime builds it (``runtime.validate``, without importing PyTorch): no part it does not build
    (``Stack.unbuilt``: latent attention; dense models too), a precision it trains in
    (``Stack.precisions``), and a mixture
    of experts with whole experts on a rank (etp 1)."""
    for field in unbuilt_parts(STACKS["meshplan"], plan.model):  # the runtime's check_buildable list, as data
        raise MeshplanError(
            f"plan.model.{field}",
            f"meshplan's runtime does not build model.{field} ({plan.model.name!r})",
            "export to megatron or torchtitan (`meshplan export --format megatron` / `torchtitan`)",
        )
    refused = precision_error(STACKS["meshplan"], plan.training.precision)  # no fp16: the runtime has no loss scaler
    if refused is not None:
        raise MeshplanError(
            "plan.training.precision",
            f"meshplan's runtime does not train in {plan.training.precision}: it trains in "
            f"{', '.join(STACKS['meshplan'].precisions)}",
            "re-plan in bf16 (training.precision), or export to megatron or deepspeed, which train in fp16",
        )
    refuse_recompute_modules(plan, "meshplan", "meshplan's runtime")  # runtime/parallelize.py apply_recompute
    if plan.model.moe is not None and plan.parallel.etp != 1:
        p = plan.parallel
        raise MeshplanError(
            "parallel.etp",
            f"meshplan's runtime runs each expert whole on a rank (etp 1), not etp={p.etp}",
            "re-plan for the meshplan stack (it picks etp 1), or export to megatron / torchtitan, which run etp = tp",
        )
