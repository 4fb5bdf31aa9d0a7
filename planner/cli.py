"""Planner commands: `meshplan models`, `meshplan gpus`, `meshplan plan`, `meshplan estimate`."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from planner.catalog import GPUS, MODELS

console = Console()
#: Wide output when not on a terminal (pipes, CI logs) so plan tables are not truncated.
wide = Console(width=None if Console().is_terminal else 200)


def models(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the catalog models."""
    if as_json:
        typer.echo(json.dumps([m.model_dump() for m in MODELS.values()], indent=2))
        return
    table = Table("id", "family", "layers", "hidden", "heads", "kv", "ffn", "vocab", "max seq")
    for m in MODELS.values():
        table.add_row(m.name, m.family, str(m.num_layers), str(m.hidden_size), str(m.num_attention_heads),
                      str(m.num_kv_heads), str(m.ffn_hidden_size), str(m.vocab_size), str(m.max_seq_len))
    console.print(table)


def gpus(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the catalog GPUs (dense datasheet rates)."""
    if as_json:
        typer.echo(json.dumps([g.model_dump() for g in GPUS.values()], indent=2))
        return
    table = Table("id", "memory GiB", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB/s", "NVLink GB/s", "NIC GB/s")
    for g in GPUS.values():
        table.add_row(g.id, f"{g.memory_gib:g}", f"{g.peak_tflops.bf16:g}", f"{g.peak_tflops.fp8 or '-'}",
                      f"{g.hbm_bandwidth_GBps:g}", f"{g.nvlink_bandwidth_GBps:g}", f"{g.nic_bandwidth_GBps:g}")
    console.print(table)


def _request_from(request_file: str | None, flags: dict) -> "PlanRequest":
    """A PlanRequest from ``--request FILE`` (JSON/YAML), with any flags given overriding it."""
    from planner.errors import MeshplanError
    from planner.io import read_document
    from planner.specs import PlanRequest

    data: dict = {}
    if request_file is not None:
        doc = read_document(request_file, "--request")
        if not isinstance(doc, dict):
            raise MeshplanError("--request", "the request file must hold a JSON/YAML object", "write a PlanRequest object")
        data = doc
    cluster = dict(data.get("cluster") or {})
    training = dict(data.get("training") or {})
    parallel = dict(data.get("parallel") or {})
    for key, dest, name in [("model", data, "model"), ("gpu", cluster, "gpu"), ("nodes", cluster, "num_nodes"),
                            ("gpus_per_node", cluster, "gpus_per_node"), ("global_batch_size", training, "global_batch_size"),
                            ("seq_len", training, "seq_len"), ("precision", training, "precision"),
                            ("tp", parallel, "tp"), ("pp", parallel, "pp"), ("dp", parallel, "dp"),
                            ("micro_batch_size", parallel, "micro_batch_size"), ("schedule", parallel, "schedule"),
                            ("virtual_stages", parallel, "virtual_stages"), ("recompute", parallel, "recompute"),
                            ("zero_stage", parallel, "zero_stage"), ("sequence_parallel", parallel, "sequence_parallel"),
                            ("top_k", data, "top_k")]:
        if flags.get(key) is not None:
            dest[name] = flags[key]
    if flags.get("stage_layers"):
        try:
            parallel["stage_layers"] = [int(x) for x in flags["stage_layers"].split(",")]
        except ValueError:
            raise MeshplanError("--stage-layers", f"{flags['stage_layers']!r} is not a comma-separated list of integers", "write e.g. 10,11,11,10") from None
    if "model" not in data:
        raise MeshplanError("--model", "no model given", "pass --model <id> (see `meshplan models`) or --request FILE")
    cluster.setdefault("num_nodes", 1)
    cluster.setdefault("gpus_per_node", 8)
    if "gpu" not in cluster:
        raise MeshplanError("--gpu", "no GPU given", "pass --gpu <id> (see `meshplan gpus`) or --request FILE")
    if "global_batch_size" not in training or "seq_len" not in training:
        raise MeshplanError("--global-batch-size" if "global_batch_size" not in training else "--seq-len",
                            "the training batch and sequence length are required", "pass --global-batch-size and --seq-len")
    data.update(cluster=cluster, training=training, parallel=parallel)
    return PlanRequest.model_validate(data)


_REQ = typer.Option(None, "--request", help="PlanRequest JSON/YAML file (flags override its fields).")
_MODEL = typer.Option(None, "--model", help="Catalog model id (see `meshplan models`).")
_GPU = typer.Option(None, "--gpu", help="Catalog GPU id (see `meshplan gpus`).")
_NODES = typer.Option(None, "--nodes", help="Number of nodes (default 1).")
_GPN = typer.Option(None, "--gpus-per-node", help="GPUs per node (default 8).")
_GBS = typer.Option(None, "--global-batch-size", help="Sequences per optimizer step.")
_SEQ = typer.Option(None, "--seq-len", help="Sequence length.")
_PREC = typer.Option(None, "--precision", help="bf16, fp16 or fp32.")
_TP = typer.Option(None, "--tp", help="Pin the tensor-parallel degree.")
_PP = typer.Option(None, "--pp", help="Pin the pipeline-parallel degree.")
_DP = typer.Option(None, "--dp", help="Pin the data-parallel degree.")
_MBS = typer.Option(None, "--micro-batch-size", help="Pin the micro-batch size.")
_SCHED = typer.Option(None, "--schedule", help="gpipe, 1f1b or interleaved-1f1b.")
_V = typer.Option(None, "--virtual-stages", help="Virtual stages per rank (interleaved).")
_RC = typer.Option(None, "--recompute", help="none, selective or full.")
_Z = typer.Option(None, "--zero-stage", help="ZeRO stage 0-3.")
_SP = typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help="Pin sequence parallelism.")
_SL = typer.Option(None, "--stage-layers", help="Pin the stage cut, e.g. 10,11,11,10.")
_JSON = typer.Option(False, "--json", help="Machine-readable output.")


def plan_cmd(request: str = _REQ, model: str = _MODEL, gpu: str = _GPU, nodes: int = _NODES, gpus_per_node: int = _GPN,
             global_batch_size: int = _GBS, seq_len: int = _SEQ, precision: str = _PREC, tp: int = _TP, pp: int = _PP,
             dp: int = _DP, micro_batch_size: int = _MBS, schedule: str = _SCHED, virtual_stages: int = _V,
             recompute: str = _RC, zero_stage: int = _Z, sequence_parallel: bool = _SP, stage_layers: str = _SL,
             top_k: int = typer.Option(None, "--top-k", help="Number of plans (default 3)."), as_json: bool = _JSON) -> None:
    """Find the fastest plans that fit (CP-SAT search, proven optimal for the modeled space)."""
    from planner.api import plan

    flags = dict(locals())
    flags.pop("request")
    response = plan(_request_from(request, flags))
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    s = response.solver
    wide.print(f"solver: [bold]{s.status}[/] objective {_fmt(s.objective_value)} s, bound {_fmt(s.best_objective_bound)} s, "
                  f"{s.configurations_considered} configuration classes, {s.wall_time_s:.2f} s")
    if response.infeasible is not None:
        inf = response.infeasible
        wide.print(f"[bold red]infeasible:[/] {inf.reason}\n[bold]change {inf.field}:[/] {inf.suggestion}")
        return
    table = Table("#", "tp", "pp", "dp", "mbs", "schedule", "recompute", "zero", "stages", "step s", "tokens/s", "MFU", "peak GiB", "binding")
    for p in response.plans:
        c, e = p.parallel, p.estimate
        sched = c.schedule + (f" v{c.virtual_stages}" if c.virtual_stages > 1 else "")
        table.add_row(str(p.rank), f"{c.tp}{'+sp' if c.sequence_parallel else ''}", str(c.pp), str(c.dp), str(c.micro_batch_size),
                      sched, c.recompute, str(c.zero_stage), ",".join(map(str, c.stage_layers)), f"{e.step_time_s:.4g}",
                      f"{e.tokens_per_s:,.0f}", f"{e.mfu:.1%}", f"{e.peak_memory_gib:.1f}",
                      p.explanation.binding_constraint if p.explanation else "")
    wide.print(table)
    best = response.plans[0]
    if best.explanation:
        wide.print(f"[bold]why:[/] {best.explanation.summary}")
        if best.explanation.runner_up:
            wide.print(f"[bold]runner-up:[/] {best.explanation.runner_up}")


def estimate_cmd(request: str = _REQ, model: str = _MODEL, gpu: str = _GPU, nodes: int = _NODES, gpus_per_node: int = _GPN,
                 global_batch_size: int = _GBS, seq_len: int = _SEQ, precision: str = _PREC, tp: int = _TP, pp: int = _PP,
                 dp: int = _DP, micro_batch_size: int = _MBS, schedule: str = _SCHED, virtual_stages: int = _V,
                 recompute: str = _RC, zero_stage: int = _Z, sequence_parallel: bool = _SP, stage_layers: str = _SL,
                 as_json: bool = _JSON) -> None:
    """Estimate step time and memory of one configuration (omitted fields take documented defaults)."""
    from planner.api import estimate_plan
    from planner.config import describe

    flags = dict(locals())
    flags.pop("request")
    p = estimate_plan(_request_from(request, flags))
    if as_json:
        typer.echo(p.model_dump_json(indent=2))
        return
    c, e, b = p.parallel, p.estimate, p.estimate.breakdown
    wide.print(describe(c, e.num_microbatches))
    table = Table("step s", "tokens/s", "TFLOP/s/GPU", "MFU", "peak GiB", "fits")
    table.add_row(f"{e.step_time_s:.4g}", f"{e.tokens_per_s:,.0f}", f"{e.model_tflops_per_gpu:.1f}", f"{e.mfu:.1%}",
                  f"{e.peak_memory_gib:.1f} / {e.gpu_memory_gib:g}", "yes" if e.fits else "[bold red]NO[/]")
    wide.print(table)
    parts = Table("compute", "TP comm", "PP bubble", "PP p2p", "DP sync", "optimizer")
    parts.add_row(*(f"{x:.4g}" for x in (b.compute_s, b.tp_comm_s, b.pp_bubble_s, b.pp_p2p_s, b.dp_sync_s, b.optimizer_s)))
    wide.print(parts)
    for note in e.notes:
        wide.print(f"note: {note}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("gpus")(gpus)
    app.command("plan")(plan_cmd)
    app.command("estimate")(estimate_cmd)
