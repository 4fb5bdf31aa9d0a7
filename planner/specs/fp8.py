"""FP8 training as data and rules (issue 24): which recipe a request runs, whether its GPU and its training
stack run it, and the facts each recipe implies for the cost model.

``training.precision: "fp8"`` is BF16 mixed precision with the transformer blocks' linears (Q, K, V, O and the
MLP's) in FP8: all three GEMMs of each (output, input gradient, weight gradient; E4M3 forward, E5M2 gradients
under the "hybrid" format). The LM head, the embedding, the attention core, norms and the router stay in 16 bits
— each stack's default: Megatron-core's output layer is a plain ``ColumnParallelLinear``, not a Transformer
Engine module, and TE's ``fp8_dpa`` (FP8 attention) is off by default; torchtitan's float8 converter skips
``filter_fqns = ["output"]`` (torchtitan docs/float8.md, torchao ``convert_to_float8_training``; DeepSeek-V3
§3.3 keeps the same set in BF16).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.common import Fp8Recipe
from planner.specs.errors import MeshplanError
from planner.specs.inputs import GpuSpec, TrainingSpec
from planner.specs.stacks import STACKS, Stack


@dataclass(frozen=True, slots=True)
class RecipeFacts:
    """What a recipe does around each FP8 GEMM, per element of the tensor it casts (HBM bytes; 16-bit input):

    * ``cast_bytes``: the cast itself (read 2, write 1 per orientation it writes);
    * ``amax_bytes``: a separate amax pass before the cast (read 2): dynamic scaling (torchao tensorwise,
      TE current scaling) computes the scale from the tensor it casts; delayed scaling takes it from the amax
      history and records the new amax inside the cast kernel (TE ``DelayedScaling``), MXFP8 finds each
      1×32 block's scale in the cast kernel;
    * ``orientations``: FP8 copies each operand needs: Hopper's FP8 tensor cores take only K-major (``TN``)
      operands, so the weight-gradient GEMM needs transposed copies of the input and the output gradient —
      an FP8 transpose (read 1, write 1) for tensorwise/delayed/current; rowwise and MXFP8 scale along one
      axis, so the other orientation is a second cast of the 16-bit tensor (torchao rowwise casts the input
      and the gradient again along columns; TE MXFP8 writes rowwise and columnwise copies);
    * ``weight_cached``: the FP8 weight (and its transpose) is cast once per step and kept across
      micro-batches (TE under Megatron: ``is_first_microbatch``) instead of once per micro-batch (torchao:
      dynamic casts inside every forward);
    * ``scale_state_bytes``: scaling state per FP8 linear (delayed: fp32 amax histories of length 1024 of the
      input, weight and output gradient; others: a few scalars);
    * ``rescale_bytes``: a pass over each backward GEMM's output after the GEMM (per element of the input gradient
      and of the weight gradient). torchao's rowwise recipe runs the two backward GEMMs with slow accumulation
      (``gemm_config_grad_input`` / ``_grad_weight`` default ``use_fast_accum=False``; the output GEMM alone is
      fast-accum, config.py:174-176 at v0.10.0), and ``addmm_float8_unwrapped`` (float8_ops.py:49-53, 74-75 at
      v0.10.0; unchanged at 6243040 of 2025-06 and v0.18.0) then calls cuBLAS's tensorwise kernel with unit scales
      and applies the row and column scales afterwards, ``output *= a_inverse_scale * b_inverse_scale`` — "the
      rowwise CUTLASS-based kernel is so slow without fast-accum"; under torch.compile one extra kernel per GEMM
      (pytorch/ao issue 2184): read 2, write 2 bytes of the 16-bit output. Other recipes scale inside the GEMM."""

    cast_bytes: float
    amax_bytes: float
    orientations: int
    weight_cached: bool
    scale_state_bytes: int
    rescale_bytes: float = 0.0


RECIPES: dict[str, RecipeFacts] = {
    "tensorwise": RecipeFacts(3.0, 2.0, 1, False, 64),
    "rowwise": RecipeFacts(3.0, 2.0, 2, False, 64, rescale_bytes=4.0),
    "delayed": RecipeFacts(3.0, 0.0, 1, True, 3 * 1024 * 4),
    "current": RecipeFacts(3.0, 2.0, 1, True, 64),
    "mxfp8": RecipeFacts(3.0 + 1 / 32, 0.0, 2, True, 64),
}

#: Recipes by GPU generation: FP8 tensor cores from Hopper (sm_90: H100, H200) on; MXFP8's block-scaled
#: GEMMs (E8M0 scales per 32 elements) only on Blackwell (sm_100: B200; NVIDIA Blackwell architecture
#: technical brief; TE ``MXFP8BlockScaling``: "Blackwell and later").
BLACKWELL_PREFIXES = ("b100", "b200", "b300", "gb200", "gb300")


def recipe_of(training: TrainingSpec, stack: Stack) -> Fp8Recipe | None:
    """The FP8 recipe a request runs: its ``training.fp8_recipe``, else its stack's default (the first it
    runs); None for any other precision."""
    if training.precision != "fp8":
        return None
    if training.fp8_recipe is not None:
        return training.fp8_recipe
    return stack.fp8_recipes[0] if stack.fp8_recipes else None


def gpu_recipes(gpu: GpuSpec) -> tuple[str, ...]:
    """The recipes a GPU's tensor cores run (none without an FP8 rate)."""
    if gpu.peak_tflops.fp8 is None:
        return ()
    base = ("tensorwise", "rowwise", "delayed", "current")
    return (*base, "mxfp8") if gpu.id.lower().startswith(BLACKWELL_PREFIXES) else base


def check_fp8(training: TrainingSpec, gpu: GpuSpec, stack: Stack, catalog: dict[str, GpuSpec]) -> None:
    """Raise a ``MeshplanError`` naming the field when the request asks for FP8 on a GPU without FP8 tensor
    cores, or a recipe the GPU or the training stack does not run."""
    if training.precision != "fp8":
        return
    with_fp8 = ", ".join(g for g, spec in catalog.items() if spec.peak_tflops.fp8 is not None)
    if gpu.peak_tflops.fp8 is None:
        raise MeshplanError(
            "training.precision",
            f"the GPU {gpu.id!r} has no FP8 tensor cores (its datasheet gives no FP8 rate)",
            f'use training.precision "bf16", or a GPU with FP8 ({with_fp8})',
        )
    if not stack.fp8_recipes:
        runs = [s.id for s in STACKS.values() if s.fp8_recipes]
        raise MeshplanError(
            "training.precision",
            f"the training stack {stack.id!r} ({stack.version}) does not train in FP8",
            f'use training.precision "bf16", or a stack that does (training.stack: {" / ".join(runs)})',
        )
    recipe = recipe_of(training, stack)
    assert recipe is not None
    if recipe not in stack.fp8_recipes:
        runs = [s.id for s in STACKS.values() if recipe in s.fp8_recipes]
        raise MeshplanError(
            "training.fp8_recipe",
            f"the training stack {stack.id!r} ({stack.version}) does not run the FP8 recipe {recipe!r}: it runs "
            f"{', '.join(stack.fp8_recipes)}",
            f"choose one of {', '.join(stack.fp8_recipes)}"
            + (f", or a stack that runs {recipe!r} (training.stack: {' / '.join(runs)})" if runs else ""),
        )
    if recipe not in gpu_recipes(gpu):
        blackwell = ", ".join(g for g in catalog if g.lower().startswith(BLACKWELL_PREFIXES))
        raise MeshplanError(
            "training.fp8_recipe",
            f"the GPU {gpu.id!r} does not run the FP8 recipe {recipe!r} (MXFP8 block scaling needs Blackwell "
            "tensor cores)",
            f"choose one of {', '.join(r for r in gpu_recipes(gpu) if r in stack.fp8_recipes)}, or a Blackwell GPU "
            f"({blackwell})",
        )
