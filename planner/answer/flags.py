"""The flags of ``meshplan plan``/``estimate``, generated from ``PlanRequest`` (``request_flags``).

Every scalar field of the request and of its nested specs is a flag named after the field
(``--global-batch-size`` sets ``training.global_batch_size``), with the field's description as help;
the few fields that are not flags are listed in ``NOT_FLAGS`` with the reason. A new request field is
thus a new flag, and ``tests/test_planner_cli.py`` (which freezes the flag list) names it.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import typer
from pydantic import BaseModel

from planner.specs import ParallelPins, PlanRequest
from planner.specs.hf import is_hf_config

# ---------------------------------------------------------------------------------------------
# The request's flags, from PlanRequest

#: Request fields that are not flags, and why (they stay settable through ``--request FILE``).
NOT_FLAGS = {
    "profile_id": "stored profiles are resolved by the service only",
    "calibration_id": "stored calibrations are resolved by the service only",
}
#: Fields that are whole documents: their flag takes a JSON/YAML file (``--profile FILE``). ``model`` takes
#: a file too when its value is one (``--model my-model.yaml``), else a catalog id.
DOCUMENT_FLAGS = {
    "profile": "Layer profile JSON/YAML file (from `meshplan profile model`); its measured times price the layers.",
    "network": "Network profile JSON/YAML file (from `meshplan profile cluster`); its fits price the collectives.",
    "calibration": "Calibration JSON/YAML file (from `meshplan calibrate`); its residual constants price the plan.",
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
    "parallel.tp_comm_overlap": "Pin overlapped tensor parallelism (TE userbuffers / torchtitan async TP; needs SP).",
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
PLAN_ONLY = {"top_k", "options.time_limit_s", "options.num_workers", "options.prove"}


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

    from planner.answer.io import read_document
    from planner.specs.errors import InvalidInput, MeshplanError, validation_errors

    cls = next(iter(_models_in(PlanRequest.model_fields[flag.path].annotation)))
    data = read_document(path, flag.name)
    if flag.path == "model" and is_hf_config(data):
        return hf_model_file(data, path, flag.name).model_dump(mode="json", exclude_none=True)
    try:
        return cls.model_validate(data).model_dump(mode="json", exclude_none=True)
    except ValidationError as exc:
        raise InvalidInput(
            [
                MeshplanError(
                    f"{e['field']} (in {path}, given by {flag.name})",
                    e["message"],
                    e["fix"].replace("set ", f"in {path} set ", 1),
                )
                for e in validation_errors(exc, model=cls)
            ]
        ) from None


def hf_model_file(data: Any, path: str, given_by: str) -> Any:
    """The ModelSpec of a Hugging Face config.json file (``planner.specs.hf``), named by its ``_name_or_path``,
    else by the file (its folder's name for a ``config.json``); its errors name the file and the flag."""
    from pathlib import Path

    from pydantic import ValidationError

    from planner.specs.errors import MeshplanError
    from planner.specs.hf import from_hf_config

    p = Path(path)
    name = p.resolve().parent.name if p.stem == "config" else p.stem
    try:
        return from_hf_config(data, None if data.get("_name_or_path") else name or None)
    except ValidationError as exc:  # the ModelSpec it reads into is invalid
        first = exc.errors(include_url=False)[0]
        what = f"{first['msg']} at {'.'.join(map(str, first['loc'])) or 'the model'}"
        raise MeshplanError(f"{given_by} {path}", what, "correct the config.json, or give a ModelSpec") from None
    except ValueError as exc:  # a FieldValueError names the config.json key (``sub``: hf_config.<key>)
        what, _, fix = str(exc).partition("; ")
        sub = getattr(exc, "sub", None)
        key = f" field {sub.removeprefix('hf_config.')}" if isinstance(sub, str) and sub != "hf_config" else ""
        raise MeshplanError(f"{given_by} {path}{key}", what, fix) from None


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
        plain = [
            a for a in typing.get_args(info.annotation) or [info.annotation] if a is not type(None) and a not in nested
        ]
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
        metavar = METAVARS.get(path) or (
            "CHOICE" if choices else {"int": "INT", "float": "NUMBER", "list": "N,N,...", "str": "ID"}.get(kind, "")
        )
        flags.append(Flag(path, RENAMED.get(path, "--" + name.lower().replace("_", "-")), kind, text.strip(), metavar))
    return flags


FLAGS = request_flags()
FLAG_OF = {f.path: f.name for f in FLAGS}


def pin_flags(pins: ParallelPins) -> str:
    """The ``meshplan plan`` flags that pin each field ``pins`` gives (e.g. a ``solver.unproven`` class's)."""

    def flag(key: str, value: Any) -> str:
        name = FLAG_OF[f"parallel.{key}"]
        if isinstance(value, bool):
            return name if value else f"--no-{name[2:]}"
        return f"{name} {','.join(map(str, value)) if isinstance(value, list) else value}"

    return " ".join(flag(k, v) for k, v in pins.model_dump(exclude_none=True).items())


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

    from planner.answer.io import read_document
    from planner.specs.errors import InvalidInput, MeshplanError, explain

    data: dict = {}
    if request_file is not None:
        doc = read_document(request_file, "--request")
        if not isinstance(doc, dict):
            raise MeshplanError(
                "--request", "the request file must hold a JSON/YAML object", "write a PlanRequest object"
            )
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
                e.fix += " (or give it in --request FILE)" + (
                    " (or --cluster-preset)" if e.field in {"--gpu", "--gpus-per-node"} else ""
                )
        raise InvalidInput(errors) from None


@contextmanager
def flag_names() -> Iterator[None]:
    """Errors the planner raises about a request field name the flag that sets it (``parallel.tp`` →
    ``--tp``): on the command line, the flag is what the user typed."""
    from planner.specs.errors import InvalidInput, MeshplanError

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


def command(name: str, run: Callable[[PlanRequest, bool], None], flags: list[Flag], doc: str) -> Callable[..., None]:
    """A Typer command ``name`` taking ``--request FILE``, ``flags`` and ``--json``; it builds the
    request and hands it to ``run(request, as_json)``."""
    P = inspect.Parameter
    params = [
        P(
            "request",
            P.KEYWORD_ONLY,
            annotation=str | None,
            default=typer.Option(
                None, "--request", help="PlanRequest JSON/YAML file (flags override its fields).", metavar="FILE"
            ),
        )
    ]
    for f in flags:
        if f.kind == "bool":
            option = typer.Option(None, f"{f.name}/--no-{f.name[2:]}", help=f.help)
        else:
            option = typer.Option(None, f.name, help=f.help, metavar=f.metavar)
        params.append(
            P(f.param, P.KEYWORD_ONLY, annotation=bool | None if f.kind == "bool" else str | None, default=option)
        )
    params.append(
        P(
            "as_json",
            P.KEYWORD_ONLY,
            annotation=bool,
            default=typer.Option(False, "--json", help="Machine-readable output."),
        )
    )

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
