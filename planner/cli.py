"""Planner commands: `meshplan models`, `gpus`, `clusters`, `plan`, `estimate`, `diff`.

The flags of ``plan``/``estimate`` are generated from ``PlanRequest`` (``request_flags``): every scalar
field of the request and of its nested specs is a flag named after the field (``--global-batch-size``
sets ``training.global_batch_size``), with the field's description as help; the few fields that are
not flags are listed in ``NOT_FLAGS`` with the reason. A new request field is thus a new flag, and
``tests/test_planner_cli.py`` (which freezes the flag list) names it.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional

import typer
from pydantic import BaseModel
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.catalog import CLUSTER_PRESETS, GPUS, MODELS
from planner.specs import PlanRequest


def console() -> Console:
    """The terminal's width on a terminal; unlimited otherwise (pipes, files, CI logs), so that ids and
    plan tables are printed whole whatever COLUMNS says."""
    term = Console()
    return term if term.is_terminal else Console(width=1_000_000)


def _fit(table: Table, width: int) -> bool:
    """Give ``table``'s columns widths that keep every word whole within ``width`` columns (rich's own
    layout may cut a column below its longest word, or crop the table); False when no such layout
    exists. Columns get their longest word, then the room left goes to the columns needing least more
    to show their cells on one line."""
    from rich.cells import cell_len
    from rich.text import Text

    texts = [[Text.from_markup(str(x)).plain for x in [c.header, *c.cells]] for c in table.columns]
    mins = [max([cell_len(w) for t in col for w in t.split()] or [1]) for col in texts]
    maxs = [max([cell_len(line) for t in col for line in t.splitlines()] or [1]) for col in texts]
    room = width - table._extra_width - sum(table._get_padding_width(i) for i in range(len(texts)))
    if sum(mins) > room:
        return False
    if sum(maxs) > room:
        widths, spare = list(mins), room - sum(mins)
        for i in sorted(range(len(texts)), key=lambda i: maxs[i] - mins[i]):
            add = min(spare, maxs[i] - widths[i])
            widths[i] += add
            spare -= add
        for column, w in zip(table.columns, widths):
            column.width = w
    return True


def show(table: Table, out: Console | None = None) -> None:
    """Print ``table`` with every value whole. On a terminal, cells wrap at spaces (headers too) but a
    word is never cut or replaced by '…' (``_fit``); when no layout fits the terminal, each row is
    printed as a record (``header: value`` lines) instead. Off a terminal (pipes, files) the width is
    unlimited: always the table, one line per row."""
    out = out or console()
    if _fit(table, out.width):
        out.print(table)
        return
    headers = [" ".join(str(c.header).split()) for c in table.columns]
    columns = [[str(cell) for cell in c.cells] for c in table.columns]
    width = max(map(len, headers))
    for r in range(table.row_count):
        out.rule(style="dim")
        for header, cells in zip(headers, columns):
            out.print(f"{header:>{width}}: {cells[r]}", highlight=False, soft_wrap=True)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def models(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the catalog models."""
    if as_json:
        typer.echo(json.dumps([m.model_dump() for m in MODELS.values()], indent=2))
        return
    table = Table("id", "family", "layers", "hidden", "heads", "kv", "ffn", "vocab", "max seq", show_edge=False)  # fits 80 columns
    table.columns[0].no_wrap = True
    for m in MODELS.values():
        table.add_row(m.name, m.family, str(m.num_layers), str(m.hidden_size), str(m.num_attention_heads),
                      str(m.num_kv_heads), str(m.ffn_hidden_size), str(m.vocab_size), str(m.max_seq_len))
    show(table)


def gpus(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the catalog GPUs (dense datasheet rates)."""
    if as_json:
        typer.echo(json.dumps([g.model_dump() for g in GPUS.values()], indent=2))
        return
    table = Table("id", "memory GiB", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB/s", "NVLink GB/s", "NIC GB/s")
    table.columns[0].no_wrap = True
    for g in GPUS.values():
        fp8 = f"{g.peak_tflops.fp8:g}" if g.peak_tflops.fp8 else "-"
        table.add_row(g.id, f"{g.memory_gib:g}", f"{g.peak_tflops.bf16:g}", fp8, f"{g.hbm_bandwidth_GBps:g}",
                      f"{g.nvlink_bandwidth_GBps:g}", f"{g.nic_bandwidth_GBps:g}")
    show(table)


def clusters(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the cluster presets (give one as --cluster-preset): GPU, GPUs per node, links as stated and per GPU."""
    if as_json:
        typer.echo(json.dumps([p.model_dump() for p in CLUSTER_PRESETS.values()], indent=2))
        return
    table = Table("id", "gpu", "GPUs per node", "intra-node", "inter-node", "inter GB/s per GPU")
    table.columns[0].no_wrap = True
    for p in CLUSTER_PRESETS.values():
        table.add_row(p.id, p.gpu, str(p.gpus_per_node), p.intra_node_bandwidth, p.inter_node_bandwidth,
                      f"{p.inter_node_bandwidth_GBps:g}")
    show(table)
    for p in CLUSTER_PRESETS.values():
        console().print(f"{p.id}: {p.description}. Source: {p.source}", highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------------------------
# The request's flags, from PlanRequest

#: Request fields that are not flags, and why (they stay settable through ``--request FILE``).
NOT_FLAGS = {
    "profile_id": "stored profiles are resolved by the service only",
}
#: Fields that are whole documents: their flag takes a JSON/YAML file (``--profile FILE``). ``model`` takes
#: a file too when its value is one (``--model my-model.yaml``), else a catalog id.
DOCUMENT_FLAGS = {
    "profile": "Layer profile JSON/YAML file (from `meshplan profile model`); its measured times price the layers.",
    "network": "Network profile JSON/YAML file (from `meshplan profile cluster`); its fits price the collectives.",
}
#: Flags whose name is not the field's own (public names kept from before the flags were generated).
RENAMED = {"cluster.num_nodes": "--nodes", "cluster.preset": "--cluster-preset"}
#: Values the CLI supplies where the request has no default (a single 8-GPU node).
CLI_DEFAULTS = {"cluster.num_nodes": 1, "cluster.gpus_per_node": 8}
#: Help for fields whose schema has no description.
HELP = {
    "model": "Catalog model id (see `meshplan models`), or a ModelSpec JSON/YAML file.",
    "cluster.gpu": "Catalog GPU id (see `meshplan gpus`).",
    "cluster.num_nodes": "Number of nodes.",
    "cluster.gpus_per_node": "GPUs per node.",
    "training.seq_len": "Sequence length (tokens).",
    "training.precision": "Training precision.",
    "training.optimizer": "Optimizer (its state is priced in memory and step time).",
    "parallel.tp": "Pin the tensor-parallel degree.",
    "parallel.pp": "Pin the pipeline-parallel degree.",
    "parallel.dp": "Pin the data-parallel degree.",
    "parallel.micro_batch_size": "Pin the micro-batch size.",
    "parallel.schedule": "Pin the pipeline schedule.",
    "parallel.virtual_stages": "Pin the virtual stages (model chunks) per pipeline rank (interleaved schedules).",
    "parallel.recompute": "Pin activation recomputation.",
    "parallel.sequence_parallel": "Pin sequence parallelism.",
    "parallel.zero_stage": "Pin the ZeRO stage (0-3).",
    "parallel.stage_layers": "Pin the layers of each model chunk, comma-separated, e.g. 10,11,11,10.",
    "top_k": "Number of plans.",
    "cluster.intra_node_latency_us": "Override of the intra-node link latency, µs.",
    "cluster.preset": "A known system (see `meshplan clusters`): sets the GPU, GPUs per node and link bandwidths not given.",
    "cluster.inter_node_bandwidth": "Inter-node network as stated: '8x400Gb/s' (NICs per node × rate), '400 Gb/s per GPU' "
                                    "or '400 Gb/s per node'.",
    "cluster.intra_node_bandwidth": "Intra-node link bandwidth as stated, one direction, e.g. '450 GB/s per GPU'.",
    "cluster.inter_node_latency_us": "Override of the inter-node link latency, µs.",
}
#: Metavars of flags whose value is not a plain id or number.
METAVARS = {"model": "ID|FILE", "cluster.intra_node_bandwidth": "RATE", "cluster.inter_node_bandwidth": "RATE"}
#: Fields that only ``plan`` reads (``estimate`` prices one configuration and does not search).
PLAN_ONLY = {"top_k", "options.time_limit_s", "options.num_workers"}


@dataclass(frozen=True)
class Flag:
    """One command-line flag and the request field it sets."""

    path: str  # dotted field path in PlanRequest, e.g. "training.global_batch_size"
    name: str  # "--global-batch-size"
    kind: str  # "int", "float", "bool", "list", "str"
    help: str
    metavar: str

    @property
    def param(self) -> str:  # the Python parameter name of the command function
        return self.path.replace(".", "__")

    def parse(self, raw: Any) -> Any:
        """The flag's text as the request's JSON value (pydantic validates and converts it); a document
        flag's file (and ``--model FILE``) read and validated, its errors naming the file and the flag."""
        if self.kind == "file" or (self.path == "model" and _is_file(raw)):
            return _read_spec(self, raw)
        return [x.strip() for x in raw.split(",")] if self.kind == "list" else raw


def _is_file(raw: str) -> bool:
    from pathlib import Path

    return raw.endswith((".json", ".yaml", ".yml")) or "/" in raw or Path(raw).is_file()


def _read_spec(flag: Flag, path: str) -> dict:
    """The validated document ``path`` given by ``flag`` (its spec type is the request field's)."""
    from pydantic import ValidationError

    from planner.errors import InvalidInput, MeshplanError, validation_errors
    from planner.io import read_document

    cls = next(iter(_models_in(PlanRequest.model_fields[flag.path].annotation)))
    data = read_document(path, flag.name)
    try:
        return cls.model_validate(data).model_dump(mode="json", exclude_none=True)
    except ValidationError as exc:
        raise InvalidInput([MeshplanError(f"{e['field']} (in {path}, given by {flag.name})", e["message"],
                                          e["fix"].replace("set ", f"in {path} set ", 1))
                            for e in validation_errors(exc, model=cls)]) from None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    return [a for a in typing.get_args(annotation) or [annotation] if isinstance(a, type) and issubclass(a, BaseModel)]


def _kind(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) or [annotation] if a is not type(None)]
    if typing.get_origin(annotation) is list or any(typing.get_origin(a) is list for a in args):
        return "list"
    for t in (bool, int, float):
        if args == [t]:
            return t.__name__
    return "str"


def _choices(annotation: Any) -> list[str]:
    for a in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(a) is typing.Literal:
            return [str(x) for x in typing.get_args(a)]
    return []


def request_flags(model: type[BaseModel] = PlanRequest, prefix: str = "") -> list[Flag]:
    """One flag per scalar field of ``model`` and of its nested specs, except ``NOT_FLAGS``. A field
    that is a nested spec (or its absence) is descended into; one that may also be a plain value (a
    catalog id or an inline spec, like ``model``) is a flag taking the plain value."""
    flags = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        if path in NOT_FLAGS:
            continue
        if path in DOCUMENT_FLAGS:
            flags.append(Flag(path, "--" + name.lower().replace("_", "-"), "file", DOCUMENT_FLAGS[path], "FILE"))
            continue
        nested = _models_in(info.annotation)
        plain = [a for a in typing.get_args(info.annotation) or [info.annotation] if a is not type(None) and a not in nested]
        if nested and not plain:
            flags += request_flags(nested[0], f"{path}.")
            continue
        kind = _kind(info.annotation)
        choices = _choices(info.annotation)
        text = HELP.get(path) or (info.description or "").strip()
        if choices:
            text += f" One of: {', '.join(choices)}."
        default = CLI_DEFAULTS.get(path, None if info.is_required() else info.get_default(call_default_factory=True))
        if default is not None and kind != "bool":
            text += f" [default: {default}]"
        metavar = METAVARS.get(path) or ("CHOICE" if choices else {"int": "INT", "float": "NUMBER", "list": "N,N,...", "str": "ID"}.get(kind, ""))
        flags.append(Flag(path, RENAMED.get(path, "--" + name.lower().replace("_", "-")), kind, text.strip(), metavar))
    return flags


FLAGS = request_flags()
FLAG_OF = {f.path: f.name for f in FLAGS}


def _set(data: dict, path: str, value: Any, *, overwrite: bool = True) -> None:
    *parents, leaf = path.split(".")
    node = data
    for key in parents:
        child = node.get(key)
        node[key] = child = dict(child) if isinstance(child, dict) else {} if child is None else child
        node = child
    if isinstance(node, dict) and (overwrite or leaf not in node):
        node[leaf] = value


def _has(data: dict, path: str) -> bool:
    node: Any = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def request_from(request_file: str | None, values: dict[str, Any]) -> PlanRequest:
    """A PlanRequest from ``--request FILE`` (JSON/YAML) with the flags given (``values``: field path →
    flag text) overriding it. A bad value is an ``InvalidInput`` naming the flag it came from (or the
    field path and the file, for a value from the file), each with its fix."""
    from pydantic import ValidationError

    from planner.errors import InvalidInput, MeshplanError, explain
    from planner.io import read_document

    data: dict = {}
    if request_file is not None:
        doc = read_document(request_file, "--request")
        if not isinstance(doc, dict):
            raise MeshplanError("--request", "the request file must hold a JSON/YAML object", "write a PlanRequest object")
        data = doc
    by_path = {f.path: f for f in FLAGS}
    given = {path: by_path[path].parse(raw) for path, raw in values.items() if raw is not None}
    for path, value in given.items():
        _set(data, path, value)
    for path, value in CLI_DEFAULTS.items():
        if path == "cluster.gpus_per_node" and _has(data, "cluster.preset"):
            continue  # the preset says how many GPUs its nodes have
        _set(data, path, value, overwrite=False)
    named = {path: flag for path, flag in FLAG_OF.items() if path in given or not _has(data, path)}
    try:
        return PlanRequest.model_validate(data)
    except ValidationError as exc:
        errors = explain(exc, model=PlanRequest, flags=named).errors
        for e in errors:
            if request_file is not None and not e.field.startswith("--"):
                e.field = f"{e.field} (in {request_file})"
            elif e.message == "is required":
                e.fix += " (or give it in --request FILE)" + (" (or --cluster-preset)" if e.field in {"--gpu", "--gpus-per-node"} else "")
        raise InvalidInput(errors) from None


@contextmanager
def flag_names() -> Iterator[None]:
    """Errors the planner raises about a request field name the flag that sets it (``parallel.tp`` →
    ``--tp``): on the command line, the flag is what the user typed."""
    from planner.errors import InvalidInput, MeshplanError

    def renamed(e: MeshplanError) -> MeshplanError:
        flag = FLAG_OF.get(e.field)
        document = next((p for p in DOCUMENT_FLAGS if e.field.startswith(p + ".")), None)
        if flag is None and document is not None:  # a field inside a document: the flag that gave the file
            flag = f"{FLAG_OF[document]} ({e.field.removeprefix(document + '.')})"
        return MeshplanError(flag, e.message, e.fix) if flag else e

    try:
        yield
    except InvalidInput as exc:
        raise InvalidInput([renamed(e) for e in exc.errors]) from None
    except MeshplanError as exc:
        if exc.field in FLAG_OF or any(exc.field.startswith(p + ".") for p in DOCUMENT_FLAGS):
            raise renamed(exc) from None
        raise


def _command(name: str, run: Callable[[PlanRequest, bool], None], flags: list[Flag], doc: str) -> Callable[..., None]:
    """A Typer command ``name`` taking ``--request FILE``, ``flags`` and ``--json``; it builds the
    request and hands it to ``run(request, as_json)``."""
    P = inspect.Parameter
    params = [P("request", P.KEYWORD_ONLY, annotation=Optional[str],
                default=typer.Option(None, "--request", help="PlanRequest JSON/YAML file (flags override its fields).",
                                     metavar="FILE"))]
    for f in flags:
        if f.kind == "bool":
            option = typer.Option(None, f"{f.name}/--no-{f.name[2:]}", help=f.help)
        else:
            option = typer.Option(None, f.name, help=f.help, metavar=f.metavar)
        params.append(P(f.param, P.KEYWORD_ONLY, annotation=Optional[bool] if f.kind == "bool" else Optional[str], default=option))
    params.append(P("as_json", P.KEYWORD_ONLY, annotation=bool, default=typer.Option(False, "--json", help="Machine-readable output.")))

    def command(**kwargs: Any) -> None:
        as_json = kwargs.pop("as_json")
        request_file = kwargs.pop("request")
        with flag_names():
            run(request_from(request_file, {f.path: kwargs[f.param] for f in flags}), as_json)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = command.__qualname__ = name.replace("-", "_")
    command.__doc__ = doc
    return command


def _plan(request: PlanRequest, as_json: bool) -> None:
    from planner.api import plan

    response = plan(request)
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    out = console()
    s = response.solver
    out.print(f"solver: [bold]{s.status}[/] objective {_fmt(s.objective_value)} s, bound {_fmt(s.best_objective_bound)} s, "
              f"{s.configurations_considered} configuration classes, {s.wall_time_s:.2f} s", soft_wrap=True)
    if response.infeasible is not None:
        inf = response.infeasible
        out.print(f"[bold red]infeasible:[/] {escape(inf.reason)}\n[bold]change {FLAG_OF.get(inf.field, inf.field)}:[/] "
                  f"{escape(inf.suggestion)}", soft_wrap=True)
        return
    # one space between columns, no side borders: a plan row fits 100 columns (records below that: ``show``)
    table = Table("#", "tp", "pp", "dp", "mbs", "schedule", "recompute", "zero", "stages", "step s", "tokens/s", "MFU", "peak GiB",
                  "binding", box=box.SIMPLE_HEAD, padding=(0, 0), show_edge=False)
    for p in response.plans:
        c, e = p.parallel, p.estimate
        sched = c.schedule + (f" v{c.virtual_stages}" if c.virtual_stages > 1 else "")
        table.add_row(str(p.rank), f"{c.tp}{'+sp' if c.sequence_parallel else ''}", str(c.pp), str(c.dp), str(c.micro_batch_size),
                      sched, c.recompute, str(c.zero_stage), ",".join(map(str, c.stage_layers)), f"{e.step_time_s:.4g}",
                      f"{e.tokens_per_s:,.0f}", f"{e.mfu:.1%}", f"{e.peak_memory_gib:.1f}",
                      p.explanation.binding_constraint if p.explanation else "")
    show(table, out)
    best = response.plans[0]
    if best.explanation:
        out.print(f"[bold]why:[/] {escape(best.explanation.summary)}", soft_wrap=True)
        if best.explanation.runner_up:
            out.print(f"[bold]runner-up:[/] {escape(best.explanation.runner_up)}", soft_wrap=True)


def _estimate(request: PlanRequest, as_json: bool) -> None:
    from planner.api import estimate_plan
    from planner.config import describe

    p = estimate_plan(request)
    if as_json:
        typer.echo(p.model_dump_json(indent=2))
        return
    out = console()
    c, e, b = p.parallel, p.estimate, p.estimate.breakdown
    out.print(f"configuration: {describe(c, e.num_microbatches)}", soft_wrap=True, highlight=False)
    table = Table("step s", "tokens/s", "TFLOP/s/GPU", "MFU", "peak GiB", "fits")
    table.add_row(f"{e.step_time_s:.4g}", f"{e.tokens_per_s:,.0f}", f"{e.model_tflops_per_gpu:.1f}", f"{e.mfu:.1%}",
                  f"{e.peak_memory_gib:.1f} / {e.gpu_memory_gib:g}", "yes" if e.fits else "[bold red]NO[/]")
    show(table, out)
    parts = Table("compute", "TP comm", "PP bubble", "PP p2p", "DP sync", "optimizer")
    parts.add_row(*(f"{x:.4g}" for x in (b.compute_s, b.tp_comm_s, b.pp_bubble_s, b.pp_p2p_s, b.dp_sync_s, b.optimizer_s)))
    show(parts, out)
    for note in e.notes:
        out.print(f"note: {escape(note)}", soft_wrap=True, highlight=False)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


plan_cmd = _command("plan", _plan, FLAGS,
                    "Find the fastest plans that fit (CP-SAT search, proven optimal for the modeled space).")
estimate_cmd = _command("estimate", _estimate, [f for f in FLAGS if f.path not in PLAN_ONLY],
                        "Estimate step time and memory of one configuration (omitted fields take documented defaults).")


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
    plan_a: str = typer.Argument(..., metavar="PLAN_A", help="Plan or PlanResponse JSON/YAML (from `meshplan plan --json`)."),
    plan_b: str = typer.Argument(..., metavar="PLAN_B", help="The plan to compare it with."),
    index: int = typer.Option(0, "--index", min=0, help="Which plan of PLAN_A when it is a PlanResponse (0 = best)."),
    other_index: int = typer.Option(0, "--other-index", min=0, help="Which plan of PLAN_B when it is a PlanResponse."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (a PlanComparison)."),
) -> None:
    """Show two plans side by side: settings, step time by cause, memory per pipeline stage."""
    from planner.compare import compare_plans
    from planner.io import plan_from_data, read_document

    a = plan_from_data(read_document(plan_a, "PLAN_A"), "PLAN_A", index)
    b = plan_from_data(read_document(plan_b, "PLAN_B"), "PLAN_B", other_index)
    comparison = compare_plans(a, b, f"A: {plan_a}" + (f" #{index}" if index else ""),
                               f"B: {plan_b}" + (f" #{other_index}" if other_index else ""))
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
            table.add_row(r.name, _shown(r.a, r.unit, r.name), _shown(r.b, r.unit, r.name), _delta(r, r.name), style=style)
        show(table, out)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("gpus")(gpus)
    app.command("clusters")(clusters)
    app.command("plan")(plan_cmd)
    app.command("estimate")(estimate_cmd)
    app.command("diff")(diff)
