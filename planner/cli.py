"""Planner commands: `meshplan models`, `gpus`, `clusters`, `plan`, `estimate`, `diff`.

The flags of ``plan``/``estimate`` are generated from ``PlanRequest`` (``planner.answer.flags``); tables are
printed whole at any terminal width (``planner.answer.terminal.show``).
"""

from __future__ import annotations

import json

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from planner.answer.flags import FLAG_OF, FLAGS, PLAN_ONLY, command, pin_flags
from planner.answer.terminal import console, show
from planner.specs import PlanRequest
from planner.specs.catalog import CLUSTER_PRESETS, GPUS, MODELS


def models(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the catalog models."""
    if as_json:
        typer.echo(json.dumps([m.model_dump() for m in MODELS.values()], indent=2))
        return
    table = Table(
        "id", "family", "layers", "hidden", "heads", "kv", "ffn", "vocab", "max seq", show_edge=False
    )  # fits 80 columns
    table.columns[0].no_wrap = True
    for m in MODELS.values():
        table.add_row(
            m.name,
            m.family,
            str(m.num_layers),
            str(m.hidden_size),
            str(m.num_attention_heads),
            str(m.num_kv_heads),
            str(m.ffn_hidden_size),
            str(m.vocab_size),
            str(m.max_seq_len),
        )
    show(table)
    _moe_table()


def _moe_table() -> None:
    """The catalog's mixtures of experts, one line each (prose: the table above is at its width): experts, which
    layers, total and active parameters (``planner.workload.analytic``)."""
    from planner.workload.analytic import num_active_parameters, num_parameters

    out = console()
    for m in MODELS.values():
        e = m.moe
        if e is None:
            continue
        layers = sum(m.is_moe_layer(i) for i in range(m.num_layers))
        shared = f" + {e.shared_experts} shared" if e.shared_experts else ""
        out.print(
            f"{m.name}: {e.num_experts} experts{shared} of {e.expert_ffn_hidden_size}, top-{e.top_k}, "
            f"{layers}/{m.num_layers} MoE layers; {num_parameters(m) / 1e9:.1f}B total, "
            f"{num_active_parameters(m) / 1e9:.1f}B active",
            highlight=False,
            soft_wrap=True,
        )
    out.print(
        "note: mixtures of experts are listed, not yet planned: expert-parallel pricing is not available (model.moe)",
        highlight=False,
        soft_wrap=True,
    )


def gpus(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the catalog GPUs (dense datasheet rates)."""
    if as_json:
        typer.echo(json.dumps([g.model_dump() for g in GPUS.values()], indent=2))
        return
    table = Table(
        "id", "memory GiB", "bf16 TFLOP/s", "fp16 TFLOP/s", "fp8 TFLOP/s", "HBM GB/s", "NVLink GB/s", "NIC GB/s"
    )
    table.columns[0].no_wrap = True
    for g in GPUS.values():
        p = g.peak_tflops
        table.add_row(
            g.id,
            f"{g.memory_gib:g}",
            *(f"{rate:g}" if rate else "-" for rate in (p.bf16, p.fp16, p.fp8)),
            f"{g.hbm_bandwidth_GBps:g}",
            f"{g.nvlink_bandwidth_GBps:g}",
            f"{g.nic_bandwidth_GBps:g}",
        )
    show(table)


def stacks(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the training stacks (give one as --stack, or inline as training.stack {base, ...overrides}): what each
    prices (kernels, activations, overlap, the NCCL era of its collectives) and what it runs (version, ZeRO, schedules, SP, recompute, context-
    parallel exchanges, FP8 recipes, TP overlap)."""
    from planner.specs.stacks import STACKS

    if as_json:
        typer.echo(json.dumps([s.model_dump() for s in STACKS.values()], indent=2))
        return
    table = Table("id", "attention", "dropout", "activations", "kernels", "DP grad overlap", "NCCL", "what")
    table.columns[0].no_wrap = True
    for s in STACKS.values():
        table.add_row(
            s.id,
            s.attention,
            "yes" if s.dropout else "no",
            s.activations,
            s.kernels,
            "yes" if s.overlap_grad_reduce else "no",
            s.nccl,
            s.title,
        )
    show(table)
    # What each stack runs (issue 27): the search enumerates only this; a pin outside it is an error.
    runs = Table("id", "version", "ZeRO", "ZeRO with pp > 1", "schedules", "SP", "recompute", "pp > 1 tied embeddings")
    runs.columns[0].no_wrap = True
    for s in STACKS.values():
        runs.add_row(
            s.id,
            s.version,
            ", ".join(map(str, s.zero_stages)),
            ", ".join(map(str, s.pipeline_zero_stages)),
            ", ".join(s.schedules),
            "yes" if s.sequence_parallel else "no",
            ", ".join(s.recompute),
            "yes" if s.pp_with_tied_embeddings else "no",
        )
    show(runs)
    # Precisions, context parallelism, FP8 and overlapped TP (issue 24): what each stack runs of them.
    dims = Table(
        "id", "precisions", "CP exchanges (cp_comm)", "FP8 recipes (default first)", "FP8 all-gather", "TP overlap"
    )
    dims.columns[0].no_wrap = True
    for s in STACKS.values():
        dims.add_row(
            s.id,
            ", ".join(s.precisions),
            ", ".join(s.cp_comms) or "no CP",
            ", ".join(s.fp8_recipes) or "no FP8",
            ", ".join(s.fp8_all_gather) or "—",
            s.tp_overlap or "—",
        )
    show(dims)
    for s in STACKS.values():
        console().print(f"{s.id}: {s.data_parallel}. Source: {s.runs_source}", highlight=False, soft_wrap=True)


def clusters(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the cluster presets (give one as --cluster-preset): GPU, GPUs per node, links as stated and per GPU."""
    if as_json:
        typer.echo(json.dumps([p.model_dump() for p in CLUSTER_PRESETS.values()], indent=2))
        return
    table = Table("id", "gpu", "GPUs per node", "intra-node", "inter-node", "inter GB/s per GPU")
    table.columns[0].no_wrap = True
    for p in CLUSTER_PRESETS.values():
        table.add_row(
            p.id,
            p.gpu,
            str(p.gpus_per_node),
            p.intra_node_bandwidth,
            p.inter_node_bandwidth,
            f"{p.inter_node_bandwidth_GBps:g}",
        )
    show(table)
    for p in CLUSTER_PRESETS.values():
        console().print(f"{p.id}: {p.description}. Source: {p.source}", highlight=False, soft_wrap=True)


def _plan(request: PlanRequest, as_json: bool) -> None:
    from planner.api import plan

    response = plan(request)
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    out = console()
    s = response.solver
    out.print(
        f"solver: [bold]{s.status}[/] objective {_fmt(s.objective_value)} s, bound {_fmt(s.best_objective_bound)} s, "
        f"{s.configurations_considered} configuration classes, {s.wall_time_s:.2f} s",
        soft_wrap=True,
    )
    from planner.specs.stacks import resolve as resolve_stack

    priced = f"priced for: {resolve_stack(request.training.stack).describe()}"
    if request.calibration is not None:
        priced += f"; calibrated on {len(request.calibration.runs)} runs of {request.calibration.gpu}"
    out.print(escape(priced), soft_wrap=True, highlight=False)
    for note in s.notes:
        if note.startswith("NOT PROVEN OPTIMAL") and s.status != "OPTIMAL":  # the time limit ended the search
            out.print(f"[bold yellow]{escape(note)}[/]", soft_wrap=True)
        if note.startswith("scope:"):  # what the proof does not cover, and the pin that reaches it
            out.print(escape(note), soft_wrap=True, highlight=False)
    if s.unproven and s.status != "OPTIMAL":  # the class of the lowest bound, as flags to add to this command
        first = f"to search the first of those classes alone, add: {pin_flags(s.unproven[0].parallel)}"
        out.print(escape(first), soft_wrap=True, highlight=False)
    if response.infeasible is not None:
        inf = response.infeasible
        out.print(
            f"[bold red]infeasible:[/] {escape(inf.reason)}\n[bold]change {FLAG_OF.get(inf.field, inf.field)}:[/] "
            f"{escape(inf.suggestion)}",
            soft_wrap=True,
        )
        return
    # one space between columns, no side borders: a plan row fits 100 columns (records below that: ``show``)
    table = Table(
        "#",
        "tp",
        "pp",
        "dp",
        "mbs",
        "schedule",
        "recompute",
        "zero",
        "stages",
        "step s",
        "tokens/s",
        "MFU",
        "peak GiB",
        "binding",
        box=box.SIMPLE_HEAD,
        padding=(0, 0),
        show_edge=False,
    )
    for p in response.plans:
        c, e = p.parallel, p.estimate
        sched = c.schedule + (f" v{c.virtual_stages}" if c.virtual_stages > 1 else "")
        table.add_row(
            str(p.rank),
            f"{c.tp}{'+sp' if c.sequence_parallel else ''}",
            str(c.pp),
            f"{c.dp}" + (f" ep{c.ep}" if c.ep > 1 else "") + (f" etp{c.etp}" if c.etp > 1 else ""),  # experts' EP/ETP
            str(c.micro_batch_size),
            sched,
            c.recompute,
            str(c.zero_stage),
            ",".join(map(str, c.stage_layers)),
            f"{e.step_time_s:.4g}",
            f"{e.tokens_per_s:,.0f}",
            f"{e.mfu:.1%}",
            f"{e.peak_memory_gib:.1f}",
            p.explanation.binding_constraint if p.explanation else "",
        )
    show(table, out)
    best = response.plans[0]
    if best.explanation:
        out.print(f"[bold]why:[/] {escape(best.explanation.summary)}", soft_wrap=True)
        if best.explanation.runner_up:
            out.print(f"[bold]runner-up:[/] {escape(best.explanation.runner_up)}", soft_wrap=True)


def _estimate(request: PlanRequest, as_json: bool) -> None:
    from planner.api import estimate_plan
    from planner.specs.config import describe

    p = estimate_plan(request)
    if as_json:
        typer.echo(p.model_dump_json(indent=2))
        return
    out = console()
    c, e, b = p.parallel, p.estimate, p.estimate.breakdown
    out.print(f"configuration: {describe(c, e.num_microbatches)}", soft_wrap=True, highlight=False)
    table = Table("step s", "tokens/s", "TFLOP/s/GPU", "MFU", "peak GiB", "fits")
    table.add_row(
        f"{e.step_time_s:.4g}",
        f"{e.tokens_per_s:,.0f}",
        f"{e.model_tflops_per_gpu:.1f}",
        f"{e.mfu:.1%}",
        f"{e.peak_memory_gib:.1f} / {e.gpu_memory_gib:g}",
        "yes" if e.fits else "[bold red]NO[/]",
    )
    show(table, out)
    cols = ["compute", "TP comm", "CP comm", "PP bubble", "PP p2p", "DP sync", "optimizer"]
    vals = [b.compute_s, b.tp_comm_s, b.cp_comm_s, b.pp_bubble_s, b.pp_p2p_s, b.dp_sync_s, b.optimizer_s]
    if b.ep_comm_s:  # mixture-of-experts plans with EP: the tokens' all-to-all
        cols, vals = [*cols, "EP all-to-all"], [*vals, b.ep_comm_s]
    parts = Table(*cols)
    parts.add_row(*(f"{x:.4g}" for x in vals))
    show(parts, out)
    for note in e.notes:
        out.print(f"note: {escape(note)}", soft_wrap=True, highlight=False)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


plan_cmd = command(
    "plan", _plan, FLAGS, "Find the fastest plans that fit (CP-SAT search, proven optimal for the modeled space)."
)
estimate_cmd = command(
    "estimate",
    _estimate,
    [f for f in FLAGS if f.path not in PLAN_ONLY],
    "Estimate step time and memory of one configuration (omitted fields take documented defaults).",
)


def _shown(v: object, unit: str, name: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, (bool, str)):
        return str(v).lower() if isinstance(v, bool) else v
    if isinstance(v, list):
        return ",".join(map(str, v))
    if isinstance(v, int):
        return f"{v:,}" if unit else str(v)
    if name == "mfu":
        return f"{v:.2%}"
    if unit == "tokens/s":
        return f"{v:,.0f}"
    return f"{v:.2f}" if unit == "GiB" else f"{v:.4g}"


def _delta(v, name: str) -> str:
    if v.delta is None or v.same:
        return "" if v.same else "≠"
    if name == "mfu":
        return f"{v.delta:+.2%}"
    text = f"{v.delta:+,.0f}" if v.unit == "tokens/s" else f"{v.delta:+.2f}" if v.unit == "GiB" else f"{v.delta:+.4g}"
    return text + (f" ({v.ratio:.2f}×)" if v.ratio is not None and v.unit in {"s", "tokens/s"} else "")


def diff(
    plan_a: str = typer.Argument(
        ..., metavar="PLAN_A", help="Plan or PlanResponse JSON/YAML (from `meshplan plan --json`)."
    ),
    plan_b: str = typer.Argument(..., metavar="PLAN_B", help="The plan to compare it with."),
    index: int = typer.Option(0, "--index", min=0, help="Which plan of PLAN_A when it is a PlanResponse (0 = best)."),
    other_index: int = typer.Option(0, "--other-index", min=0, help="Which plan of PLAN_B when it is a PlanResponse."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (a PlanComparison)."),
) -> None:
    """Show two plans side by side: settings, step time by cause, memory per pipeline stage."""
    from planner.answer.compare import compare_plans
    from planner.answer.io import plan_from_data, read_document

    a = plan_from_data(read_document(plan_a, "PLAN_A"), "PLAN_A", index)
    b = plan_from_data(read_document(plan_b, "PLAN_B"), "PLAN_B", other_index)
    comparison = compare_plans(
        a,
        b,
        f"A: {plan_a}" + (f" #{index}" if index else ""),
        f"B: {plan_b}" + (f" #{other_index}" if other_index else ""),
    )
    if as_json:
        typer.echo(comparison.model_dump_json(indent=2))
        return
    out = console()
    out.print(comparison.a, highlight=False, soft_wrap=True)
    out.print(comparison.b, highlight=False, soft_wrap=True)
    for title, rows in (("setting", comparison.settings), ("time", comparison.time), ("memory GiB", comparison.memory)):
        if title == "memory GiB":  # per stage: the total (every component is in --json)
            rows = [r for r in rows if r.name == "peak_memory_gib" or r.name.endswith("total_gib")]
        table = Table(title, "A", "B", "B − A")
        table.columns[0].no_wrap = True
        for r in rows:
            style = None if r.same else "bold"
            table.add_row(
                r.name, _shown(r.a, r.unit, r.name), _shown(r.b, r.unit, r.name), _delta(r, r.name), style=style
            )
        show(table, out)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("gpus")(gpus)
    app.command("clusters")(clusters)
    app.command("stacks")(stacks)
    app.command("plan")(plan_cmd)
    app.command("estimate")(estimate_cmd)
    app.command("diff")(diff)
