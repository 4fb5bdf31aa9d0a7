"""torchrun launch command (PyTorch elastic launcher; flags checked against `torchrun --help` of
torch 2.13): ``--standalone`` on one node, c10d rendezvous (``--rdzv-backend c10d``,
``--rdzv-endpoint``, ``--rdzv-id``) across nodes, ``--nnodes``, ``--nproc-per-node``,
``--max-restarts``. The same command runs on every node."""

from __future__ import annotations

import shlex

from planner.specs import Plan

from .base import Exporter, Geometry, Notes, comment_block, env_exports, geometry, header_lines
from .options import ExportOptions

TORCHRUN_VERSION = "torch 2.13 (torch.distributed.run)"


def rdzv_endpoint(options: ExportOptions, default_host: str) -> str:
    """host:port of the rendezvous; ``default_host`` is a shell expression used when none is given."""
    if options.rdzv_endpoint is None:
        return f"{default_host}:{options.rdzv_port}"
    if ":" in options.rdzv_endpoint:
        return options.rdzv_endpoint
    return f"{options.rdzv_endpoint}:{options.rdzv_port}"


def torchrun_words(geom: Geometry, options: ExportOptions, endpoint: str, rdzv_id: str) -> list[str]:
    """torchrun and its flags (endpoint/rdzv_id may be shell expressions; callers quote them)."""
    words = ["torchrun"]
    if geom.multi_node:
        words += [
            "--nnodes",
            str(geom.nnodes),
            "--nproc-per-node",
            str(geom.nproc_per_node),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            rdzv_id,
        ]
    else:
        words += ["--standalone", "--nnodes", "1", "--nproc-per-node", str(geom.nproc_per_node)]
    words += ["--max-restarts", str(options.max_restarts)]
    return words


def shell_join(words: list[str], raw: frozenset[int] = frozenset(), indent: str = "  ") -> str:
    """One command over several lines, a flag and its value on one line; words at indices in
    ``raw`` are already-quoted shell expressions. (Layout only: the words are unchanged.)"""
    parts = [w if i in raw else shlex.quote(w) for i, w in enumerate(words)]
    lines, i = [parts[0]], 1
    while i < len(parts):
        word = parts[i]
        pairs = (
            word.startswith("-")
            and "=" not in word
            and word not in _BOOLEAN_FLAGS
            and i + 1 < len(parts)
            and not parts[i + 1].startswith("-")
        )
        if pairs:
            lines.append(f"{word} {parts[i + 1]}")
            i += 2
        else:
            lines.append(word)
            i += 1
    return (" \\\n" + indent).join(lines)


_BOOLEAN_FLAGS = frozenset({"--standalone", "--no-python"})


class TorchrunExporter(Exporter):
    id = "torchrun"
    target = "torchrun"
    target_version = TORCHRUN_VERSION
    media_type = "text/x-shellscript"
    extension = "sh"
    runs_command = True  # --command replaces meshplan's runtime

    def render(self, plan: Plan, options: ExportOptions, notes: Notes) -> str:
        geom = geometry(plan, options)
        endpoint = rdzv_endpoint(options, "${MASTER_ADDR:?set MASTER_ADDR to the first node address}")
        words = torchrun_words(geom, options, endpoint, options.job_name) + options.program_args()
        raw = frozenset({words.index("--rdzv-endpoint") + 1}) if geom.multi_node else frozenset()
        if geom.multi_node and options.rdzv_endpoint is None:
            words[words.index("--rdzv-endpoint") + 1] = f'"{endpoint}"'
        how = (
            f"Run this same script on each of the {geom.nnodes} nodes (MASTER_ADDR = the first node's address)."
            if geom.multi_node
            else "Run on the one node."
        )
        body = comment_block("#", header_lines(plan, self) + [how], notes.warnings, notes.info)
        return (
            "#!/usr/bin/env bash\n"
            + body
            + "set -euo pipefail\n\n"
            + env_exports(plan, options.plan_path)
            + "\n"
            + shell_join(words, raw)
            + "\n"
        )
