"""Planner commands: `meshplan models`, `meshplan gpus` (and `plan`, `estimate`)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from planner.catalog import GPUS, MODELS

console = Console()


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


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("gpus")(gpus)
