"""FP8 training (issue 24): the transformer blocks' linears converted with torchao's float8 converter, as
torchtitan's ``Float8LinearConverter`` does (``convert_to_float8_training`` with
``Float8LinearConfig.from_recipe_name``), before the plan's parallelisms.

What runs in FP8 is what the planner prices (``planner.specs.fp8``): the three GEMMs (output, input gradient,
weight gradient) of each block linear — Q, K, V, O and the MLP's — with dynamic scaling per tensor
(``tensorwise``) or per row / column (``rowwise``); the embedding, the LM head (torchtitan's
``filter_fqns = ["output"]``), norms and attention stay in the training precision. Parameters keep their
names and their high-precision dtype (torchao casts a copy of each weight in every forward), so checkpoints,
TP rules, gradient clipping and the optimizer see the same model as without FP8.

Composition, in ``runtime.job.Job.build``'s order: convert → CP → TP → recompute → DP.

- TP: the plan's ordinary ``ColwiseParallel``/``RowwiseParallel`` styles, whose collectives carry 16/32-bit
  activations (torchtitan's choice for rowwise; for tensorwise torchtitan can use torchao's
  ``Float8ColwiseParallel``, which all-gathers sequence-parallel activations in FP8 — not here: gloo has no
  float8 collectives). torchao reduces a DTensor shard's amax over the ranks along a split dimension, so a TP
  shard is cast with the whole tensor's scale (tensorwise) or the whole row's (rowwise); with rowwise scales each
  rank's partial GEMM output is rounded to bf16 before the all-reduce, though (``runtime.split_reference``).
- FSDP2: the weights are all-gathered in their own precision (``enable_fsdp_float8_all_gather`` off): gloo
  rejects float8 in all-gather (``RuntimeError: Invalid scalar type``, ../shared/notes/moe-cp-fp8.md §8(e)),
  and the CUDA path is unmeasured, so the ``meshplan`` stack declares no FP8 all-gather
  (``planner.specs.stacks``: ``fp8_all_gather = ()``) and the planner prices its FSDP gathers in 16 bits.
- PP: each stage's linears are converted; nothing crosses a stage in FP8.

Tensorwise scales are computed from the tensor a rank casts, so the numbers depend on how the batch is split
into micro-batches (one amax per micro-batch); an FP8 run is therefore compared with an FP8 one-process
reference that runs the same micro-batches (``runtime.testing.reference_run``) and, under TP, the same per-rank
GEMMs (``runtime.split_reference``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.specs import Plan
from planner.specs.errors import MeshplanError

if TYPE_CHECKING:  # the checks before a launch (``check``, via ``runtime.validate``) must not import PyTorch
    from torch import nn

#: The ``training.fp8_recipe`` values the runtime runs: torchao's float8 training recipes (torchao 0.18
#: ``Float8LinearRecipeName``: tensorwise, rowwise; ``rowwise_with_gw_hp`` has no planner name).
RECIPES: tuple[str, ...] = ("tensorwise", "rowwise")
#: Where the other recipes run (``planner.specs.common.Fp8Recipe``).
ELSEWHERE = {
    "delayed": "Transformer Engine's DelayedScaling (training.stack megatron)",
    "current": "Transformer Engine's Float8CurrentScaling (training.stack megatron)",
    "mxfp8": "MXFP8 block scaling on Blackwell tensor cores (training.stack megatron or torchtitan, a B200)",
}


def recipe(plan: Plan) -> str | None:
    """The FP8 recipe the plan trains with (its ``training.fp8_recipe``, else the ``meshplan`` stack's default,
    the first of ``RECIPES``); None when the plan is not FP8."""
    t = plan.training
    if t.precision != "fp8":
        return None
    return t.fp8_recipe or RECIPES[0]


def check(plan: Plan) -> None:
    """Refuse (``MeshplanError`` naming ``training.fp8_recipe``) a recipe the runtime does not run."""
    r = recipe(plan)
    if r is None:
        return
    if r in RECIPES:
        import importlib.util

        if importlib.util.find_spec("torchao") is None:
            raise MeshplanError(
                "training.precision",
                "FP8 training needs torchao's float8 converter, and torchao is not installed",
                "install the runtime's extra (pip install -c constraints.txt -e '.[torch]': torchao 0.18.0), "
                'or set training.precision to "bf16"',
            )
        return
    raise MeshplanError(
        "training.fp8_recipe",
        f"the bundled runtime trains FP8 with torchao's float8 recipes ({', '.join(RECIPES)}); "
        f"{r!r} is {ELSEWHERE.get(r, 'not one of them')}",
        f"set training.fp8_recipe to one of {', '.join(RECIPES)}, or export the plan to the stack that runs {r!r} "
        "(`meshplan export`)",
    )


def is_fp8_linear(module: nn.Module, fqn: str) -> bool:
    """The linears that train in FP8: those of the transformer blocks (``layers.<i>.…``), not the LM head."""
    from torch import nn

    return isinstance(module, nn.Linear) and fqn.startswith("layers.")


def _import_torchao() -> None:
    """Import torchao without its import-time warnings, printed once per rank otherwise: its CUDA kernels (MXFP8,
    CUTLASS) do not load on a CPU build of PyTorch (float8 training does not use them), and torch 2.13 deprecates
    the pytree registration of one of its enums."""
    import logging

    logs = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.ERROR)
    try:
        import torchao  # noqa: F401
    finally:
        for log, level in zip(logs, levels, strict=True):
            log.setLevel(level)


def apply_fp8(chunk: nn.Module, plan: Plan) -> int:
    """Convert ``chunk``'s block linears to torchao ``Float8Linear`` with the plan's recipe (no FP8
    all-gather); returns how many were converted (0 when the plan is not FP8)."""
    r = recipe(plan)
    if r is None:
        return 0
    _import_torchao()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(r)
    convert_to_float8_training(chunk, config=config, module_filter_fn=is_fp8_linear)
    return count_fp8_linears(chunk)


def count_fp8_linears(module: nn.Module) -> int:
    """The torchao ``Float8Linear`` modules in ``module`` (0 when torchao is not installed)."""
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        return 0
    _import_torchao()
    from torchao.float8.float8_linear import Float8Linear

    return sum(1 for m in module.modules() if isinstance(m, Float8Linear))


def note(plan: Plan, device_type: str) -> str | None:
    """The run's note on what trained in FP8 (None when the plan is not FP8)."""
    r = recipe(plan)
    if r is None:
        return None
    rest = "bf16 (FSDP2 mixed precision)" if device_type == "cuda" else "fp32 (CPU)"
    return (
        f"fp8: the blocks' linears in FP8 (torchao float8, recipe {r}: E4M3 forward, E5M2 gradients, dynamic "
        f"scales), the rest {rest}; FSDP and TP collectives carry high-precision tensors (FP8 all-gather off: "
        "gloo has no float8 collectives, and the meshplan stack does not declare it)"
    )
