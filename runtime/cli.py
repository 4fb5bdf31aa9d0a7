"""`meshplan run`: validate a plan here, then launch ``python -m runtime.train`` through torchrun.

Its options are the worker's (``runtime.args.WORKER_ARGS``, forwarded to every worker as given) plus
the launcher's own (processes per node, nodes, rendezvous)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from planner.specs.errors import MeshplanError
from runtime.args import WORKER_ARGS, check, check_with_plan, worker_argv

ROOT = Path(__file__).resolve().parents[1]


def torchrun_command(
    *, nproc_per_node: int, nnodes: int, node_rank: int, rdzv_endpoint: str | None, worker_args: list[str]
) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1 and not rdzv_endpoint:
        cmd.append("--standalone")
    else:
        cmd += [
            f"--nnodes={nnodes}",
            f"--node-rank={node_rank}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}",
        ]
    return cmd + ["-m", "runtime.train", *worker_args]


#: The launcher's own options (the workers' are ``runtime.args.WORKER_ARGS``, added by ``_signature``).
LAUNCH_OPTIONS = {
    "nproc_per_node": (
        int | None,
        typer.Option(None, "--nproc-per-node", min=1, help="Processes per node (default: the plan's GPUs ÷ nodes)."),
    ),
    "nnodes": (int, typer.Option(1, "--nnodes", min=1, help="Nodes (each runs this same command).")),
    "node_rank": (int, typer.Option(0, "--node-rank", min=0, help="This node's rank (0 … nnodes - 1).")),
    "rdzv_endpoint": (
        str | None,
        typer.Option(None, "--rdzv-endpoint", help="host:port of the rendezvous (multi-node)."),
    ),
}


def run(**values: Any) -> None:
    """Run a plan with PyTorch (DeviceMesh, DTensor TP, pipelining, FSDP2); compare with a prediction for this hardware."""
    from planner.answer.io import load_plan
    from runtime.validate import validate_plan

    nproc_per_node, nnodes = values.pop("nproc_per_node"), values.pop("nnodes")
    node_rank, rdzv_endpoint = values.pop("node_rank"), values.pop("rdzv_endpoint")
    check(values)
    p = load_plan(values["plan"], values["plan_index"])
    gpus = p.parallel.num_gpus
    if nproc_per_node is None:
        if gpus % nnodes:
            raise MeshplanError(
                "nnodes", f"the plan's {gpus} GPUs do not split over {nnodes} nodes", "pass --nproc-per-node"
            )
        nproc_per_node = gpus // nnodes
    validate_plan(p, nproc_per_node * nnodes)  # same check the workers repeat, before any launch
    check_with_plan(values, p)
    if nnodes > 1 and not rdzv_endpoint:
        raise MeshplanError(
            "rdzv_endpoint", "a multi-node run needs a rendezvous endpoint", "pass --rdzv-endpoint host:port (node 0)"
        )
    if values["save_every"] and not values["checkpoint_dir"]:
        raise MeshplanError("save_every", "--save-every needs --checkpoint-dir", "give a folder to save to")
    if values["resume"] is not None:
        from runtime.checkpoint import resolve

        resolve(values["resume"])
    from types import SimpleNamespace

    from runtime.train import load_hardware_inputs

    load_hardware_inputs(SimpleNamespace(**values), p)  # --profile/--network: read and checked before launching
    cmd = torchrun_command(
        nproc_per_node=nproc_per_node,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        worker_args=worker_argv(values),
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH")) if x)
    env.setdefault("OMP_NUM_THREADS", "1")
    code = subprocess.call(cmd, env=env)
    if code:
        typer.echo(f"error: the run failed (torchrun exit code {code}); see the rank messages above", err=True)
        raise typer.Exit(code)


def _signature() -> inspect.Signature:
    """``meshplan run``'s options: each worker option of ``WORKER_ARGS`` (same name, default, help),
    then the launcher's."""
    P = inspect.Parameter
    params = []
    for a in WORKER_ARGS:
        kind = a.type if a.required or a.default is not None else a.type | None
        extra = {"min": a.min} if a.min is not None and a.type is int else {}
        option = typer.Option(... if a.required else a.default, a.flag, help=a.help, **extra)
        params.append(P(a.dest, P.KEYWORD_ONLY, annotation=kind, default=option))
    params += [
        P(name, P.KEYWORD_ONLY, annotation=kind, default=option) for name, (kind, option) in LAUNCH_OPTIONS.items()
    ]
    return inspect.Signature(params)


run.__signature__ = _signature()  # type: ignore[attr-defined]
run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    app.command("run")(run)
