"""`meshplan profile model` and `meshplan profile cluster`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from planner.specs import ModelSpec
from planner.specs.errors import MeshplanError

console = Console()
profile_app = typer.Typer(help="Measure per-layer costs of a model, or the network of a cluster.", no_args_is_help=True)

ROOT = Path(__file__).resolve().parents[1]


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise MeshplanError(option, f"{text!r} is not a comma-separated list of integers", "write e.g. 1,2,4") from None
    if not values:
        raise MeshplanError(option, "no values given", "write e.g. 1,2,4")
    return values


def resolve_model(value: str) -> ModelSpec:
    """A catalog id, or the path of a ModelSpec JSON/YAML file or of a Hugging Face config.json."""
    from planner.answer.flags import hf_model_file
    from planner.answer.io import load_model, read_document
    from planner.specs.catalog import MODELS, get_model
    from planner.specs.hf import is_hf_config

    if value in MODELS:
        return MODELS[value]
    if Path(value).suffix in {".json", ".yaml", ".yml"} or os.sep in value or Path(value).exists():
        data = read_document(value, "--model")
        if is_hf_config(data):
            return hf_model_file(data, value, "--model")
        return load_model(ModelSpec, value, "--model")
    return get_model(value, field="--model")


def _check_out(out: Path) -> None:
    if not out.parent.is_dir():
        raise MeshplanError("--out", f"directory {str(out.parent)!r} does not exist", "create it or write elsewhere")
    if out.is_dir():
        raise MeshplanError("--out", f"{str(out)!r} is a directory", "give a file name, e.g. profile.json")


def _si(x: float, base: int = 1000) -> str:
    """3 significant digits with a k/M/G/T/P suffix (powers of ``base``)."""
    for suffix in ("", "k", "M", "G", "T"):
        if abs(x) < 999.5:
            return f"{x:.3g}{suffix}"
        x /= base
    return f"{x:.3g}P"


# Validation errors from the profiler name its parameters; the CLI names its options.
_OPTION = {
    "device": "--device",
    "dtype": "--dtype",
    "micro_batch_sizes": "--micro-batch-sizes",
    "tp": "--tp",
    "seq_len": "--seq-len",
    "sequence_parallel": "--sequence-parallel",
}


@profile_app.command("model")
def model_command(
    model: str = typer.Option(..., "--model", help="Catalog id (see `meshplan models`) or a ModelSpec JSON/YAML file."),
    out: Path = typer.Option(..., "--out", help="Where to write the Profile JSON."),
    device: str = typer.Option(
        "meta", "--device", help="meta (FLOPs and bytes, nothing allocated), cpu or cuda (also times and peak memory)."
    ),
    micro_batch_sizes: str = typer.Option("1", "--micro-batch-sizes", help="Comma-separated, e.g. 1,2,4."),
    tp: str = typer.Option("1", "--tp", help="Tensor-parallel degrees, comma-separated, e.g. 1,2,4,8."),
    seq_len: int | None = typer.Option(None, "--seq-len", help="Sequence length (default: the model's max_seq_len)."),
    sequence_parallel: bool = typer.Option(
        False, "--sequence-parallel", help="Also record sequence-parallel variants (tp > 1)."
    ),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16, fp16 or fp32."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Untimed runs before timing (cpu/cuda)."),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Timed runs; the median is kept (cpu/cuda)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Profile each layer kind of a model at each micro-batch size and TP degree."""
    from profiler.model_profile import profile_model

    spec = resolve_model(model)
    mbs = _int_list(micro_batch_sizes, "--micro-batch-sizes")
    tps = _int_list(tp, "--tp")
    _check_out(out)
    start = time.perf_counter()
    try:
        prof = profile_model(
            spec,
            device=device,
            micro_batch_sizes=mbs,
            tps=tps,
            seq_len=seq_len,
            sequence_parallel=sequence_parallel,
            dtype=dtype,
            warmup=warmup,
            repeats=repeats,
            progress=progress,
        )
    except MeshplanError as exc:
        raise MeshplanError(_OPTION.get(exc.field, exc.field), exc.message, exc.fix) from None
    out.write_text(prof.model_dump_json(indent=2) + "\n")
    elapsed = time.perf_counter() - start

    short = {"embedding": "embed", "transformer_block": "block", "lm_head": "head"}
    table = Table(
        "layer",
        "tp",
        "mbs",
        "FLOP f/b",
        "params",
        "saved B n/s/f",
        "ms f/b",
        title=f"{spec.name} on {prof.device} ({prof.dtype}, seq {prof.layers[0].seq_len})",
    )
    for p in prof.layers:
        a = p.saved_activation_bytes
        times = "" if p.fwd_time_s is None else f"{p.fwd_time_s * 1e3:.3g}/{p.bwd_time_s * 1e3:.3g}"
        table.add_row(
            short[p.kind],
            f"{p.tp}{' sp' if p.sequence_parallel else ''}",
            str(p.micro_batch_size),
            f"{_si(p.fwd_flops)}/{_si(p.bwd_flops)}",
            _si(p.param_count),
            "/".join(_si(x, 1024) for x in (a.none, a.selective, a.full)),
            times,
        )
    console.print(table)
    console.print(f"wrote {len(prof.layers)} layer records to {out} in {elapsed:.1f} s")


@profile_app.command(
    "cluster",
    help="Measure all-reduce, all-gather, reduce-scatter and send/recv over message sizes and fit α-β per "
    "link class. Under torchrun it runs in place; otherwise it launches torchrun --standalone on this node "
    "(multi-node: run `torchrun --nnodes ... -m profiler.cluster --out net.json` yourself).",
)
def cluster_command(
    out: Path = typer.Option(..., "--out", help="Where to write the NetworkProfile JSON."),
    nproc_per_node: int = typer.Option(
        2, "--nproc-per-node", min=2, max=64, help="Processes to launch on this node (ignored under torchrun)."
    ),
    backend: str = typer.Option("auto", "--backend", help="auto (nccl with CUDA, else gloo), gloo or nccl."),
    sizes: str = typer.Option("", "--sizes", help="Message sizes in bytes, comma-separated (default: by backend)."),
    iters: int = typer.Option(10, "--iters", min=1, help="Timed iterations per size (the fastest is kept)."),
) -> None:
    from profiler.cluster import BACKENDS

    if backend not in BACKENDS:
        raise MeshplanError("--backend", f"unknown backend {backend!r}", f"use one of {', '.join(BACKENDS)}")
    _check_out(out)
    if sizes:
        size_list = _int_list(sizes, "--sizes")
        if any(s < 4 for s in size_list):
            raise MeshplanError(
                "--sizes", "message sizes must be at least 4 bytes", "give sizes in bytes, e.g. 65536,1048576"
            )
    args = ["--out", str(out), "--backend", backend, "--iters", str(iters)] + (["--sizes", sizes] if sizes else [])
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        from profiler.cluster import main

        main(args)
        return
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc_per_node}",
        "-m",
        "profiler.cluster",
        *args,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        console.print(f"[bold red]error:[/] torchrun exited with code {result.returncode}")
        raise typer.Exit(1)
    console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(profile_app, name="profile")
