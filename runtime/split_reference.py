"""The one-process reference of a tensor-parallel split for FP8 (issue 24; docs/runtime.md "FP8 training").

Tensor parallelism cuts the reduction dimension of two of a linear's three GEMMs: the forward of a row-parallel
linear (``RowwiseParallel``: K, the weight's input features) and the input gradient of a column-parallel one
(``ColwiseParallel``: the output features). Each rank runs one GEMM on its shard and the all-reduce (SP: the
reduce-scatter) sums the partial results. The FP8 scales are those of one process — torchao casts the DTensor
shard, and DTensor reduces the amax along a split dimension over the ranks, for tensorwise and rowwise alike
(tests/test_fp8_tp_split.py) — but the partial results are not: with rowwise scales torchao 0.18 rounds every
GEMM's output to bf16 (``torchao/float8/float8_ops.py``, ``addmm_float8_unwrapped``: "work around
torch._scaled_mm not having float32 output type"), so a TP run rounds each rank's partial where one process
rounds the whole sum (~4e-3 relative on one linear, ~2 % relative L2 on a 2-layer model's gradient); with
tensorwise scales the partials are fp32 and differ from one GEMM in round-off, which FP8's later casts turn into
occasional flips (1.2e-4 relative L2).

``split_linears`` reproduces the split in one process: each linear the plan's ``tp_plan`` cuts becomes a
``SplitLinear`` that casts whole tensors exactly as torchao's ``matmul_with_hp_or_float8_args`` does (the same
``hp_tensor_to_float8_dynamic`` calls with the module's own config), then runs each GEMM as the ranks run it: one
torchao FP8 mm (``Float8TrainingTensor`` of the shard's data and scales) per shard, partials summed in fp32 in
rank order. At tp 2 that is one fp32 addition, which is commutative, so the order in which gloo's all-reduce adds
the two ranks' values cannot change it. A high-precision linear the plan cuts (the LM head) is split the same
way with ``F.linear``. The weights keep their names and shapes, so the reference's gradients compare with a run's
parameter for parameter. Measured: bitwise equal to TP2 runs (tests/test_fp8_tp_split.py, and the FP8 × TP rows of
tests/test_runtime_equivalence.py).

Token dropping (``MoeSpec.capacity_factor``, ``runtime.models.moe``) depends on the split too: a rank computes an
expert's capacity from the tokens it routes in one forward, so the reference, which runs the whole global batch at
once, drops per the same groups of tokens (``drop_groups``): one micro-batch's rows (``Job.dp_slice`` and the
micro-batch loop or pipeline schedule cut consecutive rows) × one context-parallel rank's two load-balanced chunks
(``CPContext.chunks``) × one sequence-parallel shard of those (contiguous).
"""

from __future__ import annotations

import fnmatch

import torch
import torch.nn.functional as F
from torch import nn

from planner.specs import Plan


def tp_split(plan: Plan) -> int:
    """How many pieces the one-process reference cuts the TP-split GEMMs into: the plan's tp for an FP8 plan (its
    casts turn the partial sums' rounding into different FP8 values), else 1 (the reference runs each GEMM whole:
    in fp32 the split changes nothing but round-off, within the equivalence tolerance)."""
    from runtime.fp8 import recipe

    return plan.parallel.tp if recipe(plan) is not None else 1


def _cast(t: torch.Tensor, cast, role, axis: int, mm_config, config):
    """``t`` cast as torchao's ``matmul_with_hp_or_float8_args`` casts it (whole tensor: the amax of a row that TP
    splits is reduced over its shards by DTensor, so a rank casts with the whole row's scale); unchanged when that
    cast is disabled in the recipe."""
    from torchao.float8.config import ScalingType
    from torchao.float8.float8_scaling_utils import get_maybe_axiswise_dim, hp_tensor_to_float8_dynamic

    if cast.scaling_type is ScalingType.DISABLED:
        return t
    return hp_tensor_to_float8_dynamic(
        t,
        cast.target_dtype,
        mm_config,
        gemm_input_role=role,
        scaling_granularity=cast.scaling_granularity,
        axiswise_dim=get_maybe_axiswise_dim(axis, cast.scaling_granularity),
        round_scales_to_power_of_2=config.round_scales_to_power_of_2,
    )


def _narrow(t: torch.Tensor, dim: int, i: int, n: int) -> torch.Tensor:
    """Shard ``i`` of ``n`` of a 2-D operand along ``dim``: for an FP8 one, its data and (when the scale runs along
    ``dim``) its scales, the other scales kept: what the rank holds."""
    from torchao.float8.float8_training_tensor import Float8TrainingTensor

    size = t.shape[dim] // n
    if not isinstance(t, Float8TrainingTensor):
        return t.narrow(dim, i * size, size)
    scale = t._scale
    if scale.dim() == 2 and scale.shape[dim] > 1:
        scale = scale.narrow(dim, i * size, size)
    data = t._data.narrow(dim, i * size, size)
    return Float8TrainingTensor(data, scale, t._orig_dtype, t._linear_mm_config, t._gemm_input_role, t._axiswise_dim)


def _split_mm(a: torch.Tensor, b: torch.Tensor, n: int, cut: str) -> torch.Tensor:
    """``a @ b`` as ``n`` ranks compute it: ``cut`` "k" (the reduction dimension split: one GEMM per shard — each
    output rounded as torchao rounds it, to bf16 for rowwise scales — partial outputs summed in fp32 in rank order,
    as the all-reduce or reduce-scatter sums them; at n = 2 one commutative addition), "n" (output columns split)
    or "m" (output rows split): shards concatenated."""
    if cut == "k":
        out = torch.mm(_narrow(a, 1, 0, n), _narrow(b, 0, 0, n))
        for i in range(1, n):
            out = out + torch.mm(_narrow(a, 1, i, n), _narrow(b, 0, i, n))
        return out
    if cut == "n":
        return torch.cat([torch.mm(a, _narrow(b, 1, i, n)) for i in range(n)], 1)
    return torch.cat([torch.mm(_narrow(a, 0, i, n), b) for i in range(n)], 0)


class _SplitFloat8Matmul(torch.autograd.Function):
    """torchao 0.18's ``matmul_with_hp_or_float8_args`` (``torchao/float8/float8_linear.py``: the same casts with
    the same configs, the GEMMs through torchao's ``Float8TrainingTensor`` mm, ``float8_ops.float8_mm``) with each
    of the three GEMMs cut as ``style`` cuts it over ``n`` ranks: ``x @ w.T``, where ``w`` is the module's
    [out, in] weight."""

    @staticmethod
    def forward(ctx, x, w, n: int, style: str, mm_config, config):
        from torchao.float8.float8_training_tensor import GemmInputRole

        ctx.save_for_backward(x, w)
        ctx.n, ctx.style, ctx.mm_config, ctx.config = n, style, mm_config, config
        xf = _cast(x, config.cast_config_input, GemmInputRole.INPUT, -1, mm_config, config)
        wf = _cast(w.t(), config.cast_config_weight, GemmInputRole.WEIGHT, 0, mm_config, config)
        y = _split_mm(xf.reshape(-1, x.shape[-1]), wf, n, "k" if style == "rowwise" else "n")
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, grad):
        from torchao.float8.float8_training_tensor import GemmInputRole

        x, w = ctx.saved_tensors
        n, style, mm, c = ctx.n, ctx.style, ctx.mm_config, ctx.config
        g = grad.reshape(-1, grad.shape[-1])
        gf = _cast(g, c.cast_config_grad_output, GemmInputRole.GRAD_OUTPUT, -1, mm, c)
        wf = _cast(w.t(), c.cast_config_weight_for_grad_input, GemmInputRole.WEIGHT, -1, mm, c)
        # row-parallel: each rank's input-gradient columns; column-parallel: partial input gradients summed
        grad_x = _split_mm(gf, wf.t(), n, "n" if style == "rowwise" else "k")
        gf = _cast(g, c.cast_config_grad_output_for_grad_weight, GemmInputRole.GRAD_OUTPUT, 0, mm, c)
        x2 = x.reshape(-1, x.shape[-1])
        xf = _cast(x2, c.cast_config_input_for_grad_weight, GemmInputRole.INPUT, 0, mm, c)
        grad_w = _split_mm(gf.t(), xf, n, "n" if style == "rowwise" else "m")  # each rank's shard of the weight
        return grad_x.reshape(x.shape), grad_w, None, None, None, None


class SplitLinear(nn.Module):
    """A linear computed as ``tp`` ranks compute it: ``style`` "rowwise" (K split, partial outputs summed) or
    "colwise" (output features split, partial input gradients summed). ``fp8``: the torchao ``Float8Linear``'s
    (config, linear_mm_config), or None for a high-precision linear (the LM head)."""

    def __init__(self, linear: nn.Linear, style: str, tp: int):
        super().__init__()
        if style not in ("rowwise", "colwise"):
            raise ValueError(f"style must be rowwise or colwise, not {style!r}")
        dim = 1 if style == "rowwise" else 0
        if linear.weight.shape[dim] % tp:
            raise ValueError(f"a {tuple(linear.weight.shape)} weight does not split {tp} ways along dim {dim}")
        self.weight = linear.weight
        self.bias = linear.bias
        self.style, self.tp = style, tp
        config = getattr(linear, "config", None)
        self.fp8 = None if config is None else (config, linear.linear_mm_config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp8 is not None:
            config, mm_config = self.fp8
            y = _SplitFloat8Matmul.apply(x, self.weight, self.tp, self.style, mm_config, config)
            return y if self.bias is None else y + self.bias
        if self.style == "rowwise":
            xs = [a.contiguous() for a in x.chunk(self.tp, -1)]
            ws = [w.contiguous() for w in self.weight.chunk(self.tp, 1)]
            y = F.linear(xs[0], ws[0])
            for a, w in zip(xs[1:], ws[1:], strict=True):  # the all-reduce (rank order; at tp 2 commutative)
                y = y + F.linear(a, w)
            return y if self.bias is None else y + self.bias
        # one autograd node where the shards' input gradients meet, as the linear's own all-reduce sums them
        # before they reach the tensor the other linears also read
        x = x.view_as(x)
        biases = [None] * self.tp if self.bias is None else self.bias.chunk(self.tp)
        parts = []
        for w, b in zip(self.weight.chunk(self.tp), biases, strict=True):
            y = F.linear(x, w.contiguous())
            parts.append(y if b is None else y + b)
        return torch.cat(parts, -1)


def split_linears(model: nn.Module, plan: Plan, tp: int) -> int:
    """Replace each ``nn.Linear`` of ``model`` that the plan's ``tp_plan`` splits (``colwise``/``rowwise`` rules)
    by a ``SplitLinear`` over ``tp`` shards, FP8 or not; returns how many were replaced."""
    targets = []
    for name, module in model.named_modules():
        if not name or not isinstance(module, nn.Linear):
            continue
        styles = [r.style for r in plan.tp_plan if fnmatch.fnmatchcase(name, r.pattern)]
        if styles and styles[-1] in ("rowwise", "colwise"):
            targets.append((name, module, styles[-1]))
    for name, module, style in targets:
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, SplitLinear(module, style, tp))
    return len(targets)


def drop_groups(plan: Plan) -> torch.Tensor | None:
    """[global batch, seq] ids of the groups of tokens the ranks of ``plan`` route apart (module docstring): the
    token at row r, position p is routed with those of its micro-batch (r // micro_batch_size), cp rank and
    sequence-parallel shard. None for a plan that drops no tokens (no ``capacity_factor``)."""
    moe = plan.model.moe
    if moe is None or moe.capacity_factor is None:
        return None
    p, t = plan.parallel, plan.training
    sp = p.tp if p.sequence_parallel else 1  # without SP the TP ranks route the same tokens
    seq, cp = t.seq_len, p.cp
    half = seq // (2 * cp)  # a load-balanced chunk
    pos = torch.arange(seq)
    chunk = pos // half
    cp_rank = torch.where(chunk < cp, chunk, 2 * cp - 1 - chunk)
    local = torch.where(chunk < cp, 0, half) + pos % half  # position in the cp rank's tokens
    shard = local // (seq // (cp * sp))
    micro = torch.arange(t.global_batch_size) // p.micro_batch_size
    return (micro[:, None] * cp + cp_rank[None, :]) * sp + shard[None, :]


def set_drop_groups(model: nn.Module, groups: torch.Tensor | None) -> None:
    """Hand every MoE layer of ``model`` the token groups of its next forward (``MoE.drop_groups``)."""
    from runtime.models.moe import MoE

    for m in model.modules():
        if isinstance(m, MoE):
            m.drop_groups = groups
