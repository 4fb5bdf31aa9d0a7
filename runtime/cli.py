"""`meshplan run`: validate a plan here, then launch ``python -m runtime.train`` through torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer

from planner.errors import MeshplanError

ROOT = Path(__file__).resolve().parents[1]


def torchrun_command(
    plan: Path, *, nproc_per_node: int, nnodes: int, node_rank: int, rdzv_endpoint: str | None, worker_args: list[str]
) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1 and not rdzv_endpoint:
        cmd.append("--standalone")
    else:
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
    return cmd + ["-m", "runtime.train", "--plan", str(plan), *worker_args]


def run(
    plan: Path = typer.Option(..., "--plan", help="Plan or PlanResponse JSON (`meshplan plan --json`)."),
    steps: int = typer.Option(10, "--steps", min=0, help="Optimizer steps."),
    data: Path | None = typer.Option(None, "--data", help="Flat numpy token file; default: seeded synthetic tokens."),
    data_dtype: str = typer.Option("uint16", "--data-dtype", help="Token dtype of --data."),
    nproc_per_node: int | None = typer.Option(None, "--nproc-per-node", min=1, help="Processes per node (default: the plan's GPUs ÷ nodes)."),
    nnodes: int = typer.Option(1, "--nnodes", min=1, help="Nodes (each runs this same command)."),
    node_rank: int = typer.Option(0, "--node-rank", min=0),
    rdzv_endpoint: str | None = typer.Option(None, "--rdzv-endpoint", help="host:port of the rendezvous (multi-node)."),
    report: Path | None = typer.Option(None, "--report", help="Write the RunReport JSON here."),
    checkpoint_dir: Path | None = typer.Option(None, "--checkpoint-dir", help="Save DCP checkpoints here."),
    save_every: int = typer.Option(0, "--save-every", min=0, help="Save every K steps (and at the end)."),
    resume: Path | None = typer.Option(None, "--resume", help="Resume from a checkpoint (saved under any plan)."),
    seed: int = typer.Option(0, "--seed"),
    lr: float = typer.Option(1e-3, "--lr"),
    plan_index: int = typer.Option(0, "--plan-index", min=0, help="Which plan of a PlanResponse (0 = best)."),
) -> None:
    """Run a plan with PyTorch (DeviceMesh, DTensor TP, pipelining, FSDP2) and report measured vs predicted."""
    from planner.io import load_plan
    from runtime.validate import validate_plan

    p = load_plan(plan, plan_index)
    gpus = p.parallel.num_gpus
    if nproc_per_node is None:
        if gpus % nnodes:
            raise MeshplanError("nnodes", f"the plan's {gpus} GPUs do not split over {nnodes} nodes", "pass --nproc-per-node")
        nproc_per_node = gpus // nnodes
    validate_plan(p, nproc_per_node * nnodes)  # same check the workers repeat, before any launch
    if nnodes > 1 and not rdzv_endpoint:
        raise MeshplanError("rdzv_endpoint", "a multi-node run needs a rendezvous endpoint", "pass --rdzv-endpoint host:port (node 0)")
    if save_every and not checkpoint_dir:
        raise MeshplanError("save_every", "--save-every needs --checkpoint-dir", "give a folder to save to")
    if resume is not None:
        from runtime.checkpoint import resolve

        resolve(resume)
    worker = ["--plan-index", str(plan_index), "--steps", str(steps), "--seed", str(seed), "--lr", str(lr),
              "--data-dtype", data_dtype, "--save-every", str(save_every)]
    for flag, value in (("--data", data), ("--report", report), ("--checkpoint-dir", checkpoint_dir), ("--resume", resume)):
        if value is not None:
            worker += [flag, str(value)]
    cmd = torchrun_command(plan, nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
                           rdzv_endpoint=rdzv_endpoint, worker_args=worker)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH")) if x)
    env.setdefault("OMP_NUM_THREADS", "1")
    code = subprocess.call(cmd, env=env)
    if code:
        typer.echo(f"error: the run failed (torchrun exit code {code}); see the rank messages above", err=True)
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
