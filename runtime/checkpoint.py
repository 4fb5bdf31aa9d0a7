"""Distributed checkpoints with ``torch.distributed.checkpoint`` (DCP), portable across plans.

The state dicts come from ``get_state_dict`` (model and flattened optimizer state, keyed by the
unsplit model's parameter names), so every DTensor/FSDP shard is saved under its full-model name with
its global shape. Loading under another plan (other tp/pp/dp, other world size) lets DCP reshard.

Layout: ``<dir>/step-<N>/`` (one DCP checkpoint) and ``<dir>/latest`` (the last complete N).
"""

from __future__ import annotations

from pathlib import Path

from planner.specs.errors import MeshplanError

# PyTorch is imported where a checkpoint is read or written, so that `resolve` (which `meshplan run`
# and every rank call before launching anything) costs no torch import.


def _options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _state(job) -> tuple[dict, list[tuple[dict, dict]]]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    parts = [get_state_dict(m, opt, options=_options()) for m, opt in zip(job.chunks.values(), job.optimizers)]
    merged_model = {k: v for msd, _ in parts for k, v in msd.items()}
    merged_optim = {k: v for _, osd in parts for k, v in osd.items()}
    return {"model": merged_model, "optim": merged_optim, "progress": {"step": 0}}, parts


def save(job, directory: str | Path, step: int) -> Path:
    """Save the job's model and optimizer state after ``step`` completed steps (collective)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    root = Path(directory)
    path = root / f"step-{step}"
    state, _ = _state(job)
    state["progress"]["step"] = step
    dcp.save(state, checkpoint_id=str(path))
    dist.barrier()
    if dist.get_rank() == 0:
        (path / "plan.json").write_text(job.plan.model_dump_json(indent=1))
        (root / "latest").write_text(str(step))
    dist.barrier()
    return path


def resolve(directory: str | Path) -> Path:
    """A checkpoint directory: ``<dir>/step-N`` itself, or the latest under ``<dir>``."""
    root = Path(directory)
    if (root / ".metadata").is_file():
        return root
    latest = root / "latest"
    if latest.is_file():
        path = root / f"step-{latest.read_text().strip()}"
        if (path / ".metadata").is_file():
            return path
    raise MeshplanError(
        "resume",
        f"no checkpoint in {str(root)!r}",
        "pass a --checkpoint-dir a previous run saved to (or one of its step-N folders)",
    )


def load(job, directory: str | Path) -> int:
    """Load model and optimizer state into the job (any plan); returns the completed step count."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = resolve(directory)
    state, parts = _state(job)
    dcp.load(state, checkpoint_id=str(path))
    for (msd, osd), module, opt in zip(parts, job.chunks.values(), job.optimizers):
        set_state_dict(
            module,
            opt,
            model_state_dict={k: state["model"][k] for k in msd},
            optim_state_dict={k: state["optim"][k] for k in osd},
            options=_options(),
        )
    return int(state["progress"]["step"])
