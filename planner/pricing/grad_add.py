"""The gradient-accumulation pass priced (issue 27 §2): the HBM traffic of adding one micro-batch's weight gradients into
the step's gradient (``workload.accumulation.add_bytes``: what each stack's code does, cited there) on the compute
stream, at the achieved HBM bandwidth of each kernel (one per parameter tensor: ``ops.param_tensors``), and the
fused form's weight-gradient GEMMs that read and write their fp32 C (beta = 1) instead of writing a 16-bit one."""

from __future__ import annotations

from planner.pricing.device import Device
from planner.pricing.gpu import gemm_time, hbm_time
from planner.pricing.memo import memo_on
from planner.workload.accumulation import AddBytes
from planner.workload.fp8 import fp8_linears
from planner.workload.ops import param_tensors

#: the layer kinds of (block, embedding, LM head), in ``SharedTerms`` order
KINDS = ("embedding", "lm_head")


def fused_wgrad_seconds(
    ctx: Device, kind: str, tokens: int, tp: int, c_bytes: int, expert_params: int = 0
) -> tuple[float, int]:
    """(seconds the weight-gradient GEMMs of ``kind`` take beyond their priced time when they accumulate into a
    ``c_bytes`` main gradient, the weights they accumulate on this rank): each is an M×N = k×n output over K = its
    tokens; with beta = 1 its epilogue reads C and writes it in the main gradient's dtype, so its bytes are
    (k·T + T·n)·elt + 2·k·n·c_bytes (``gpu.gemm_time`` counts k·n·elt written) and it takes the larger of its FLOPs
    time (unchanged) and those bytes at achieved HBM. A MoE block's grouped experts count for the rank's share of
    them (``expert_params``, its routed experts' parameters, ÷ all the experts' weights at this split). FP8 GEMMs
    (TE accumulates them too) are left at their priced time."""
    lins = fp8_linears(ctx, kind, tp)
    e_w = sum(lin.k * lin.n * lin.experts for lin in lins if lin.experts > 1)
    share = min(1.0, expert_params / e_w) if e_w else 0.0  # the rank's share of the routed experts (1/ep)
    extra, weights = 0.0, 0.0
    for lin in lins:
        n, k = lin.n, lin.k
        # a local expert's tokens: T·routed/experts over the ranks whose tokens it serves (1/share of them)
        count, m = (1.0, float(tokens))
        if lin.experts > 1:
            count, m = lin.experts * share, tokens * lin.routed / lin.experts / (share or 1.0)
        weights += k * n * count
        if lin.fp8 or not count:
            continue
        t = gemm_time(ctx, k, n, max(1, round(m)))
        extra += count * (max(t, hbm_time(ctx, (k * m + m * n) * ctx.elt + 2 * k * n * c_bytes)) - t)
    return extra, round(weights)


@memo_on("grad_add_cache")
def grad_add_seconds(
    ctx: Device, kind: str, mbs: int, tp: int, params: tuple[int, int, int], add: AddBytes, expert_params: int = 0
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(seconds in every micro-batch's backward, seconds once per step) of the block of ``kind``, the embedding and
    the LM head with ``params`` local parameters each (``expert_params`` of the block's: its routed experts) —
    ``add.each`` bytes per parameter in one kernel per tensor
    (the fused linears' weights instead through their GEMMs: ``fused_wgrad_seconds``), and per step ``add.step``
    (zeroing the buffer). The first micro-batch is priced as the others: a rank's per-micro-batch terms have no
    first-micro-batch slot (the shared terms do not know m), so where it moves less (``add.first``: autograd keeps
    the first gradient) a step of m micro-batches is overstated by (each − first)/(m·each) of its pass. Memoised on
    the device by its arguments (``Device.grad_add_cache``: a MoE model's shared keys repeat them; ``memo.memo_on``)."""
    tokens = mbs * ctx.training.seq_len
    each, once = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    if not (add.each or add.first or add.step):
        return tuple(each), tuple(once)
    for i, k in enumerate((kind, *KINDS)):
        pe = expert_params if i == 0 else 0
        gemm, fused = fused_wgrad_seconds(ctx, k, tokens, tp, add.fused_c, pe) if add.fused_c else (0.0, 0)
        n = max(1, param_tensors(ctx.model, k)[0])
        per = max(0, params[i] - fused) / n  # elements per tensor kernel (the hooked ones)
        each[i] = gemm + n * hbm_time(ctx, per * add.each)
        once[i] = hbm_time(ctx, params[i] * add.step)
    return tuple(each), tuple(once)
