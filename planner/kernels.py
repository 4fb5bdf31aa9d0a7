"""Per-op kernel times of one layer (issue 11 §1): GEMMs by shape (wave and tile quantization over the
GPU's SMs, on a cited large-GEMM ceiling), the attention core by the stack's kernel, memory-bound ops at
achieved HBM bandwidth by transfer size. ``planner.compute`` sums them per layer; every constant is listed
with its source in ``docs/planner.md``."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from planner.analytic import FLASH_BWD_RATIO
from planner.specs import HostDispatch, ModelSpec

if TYPE_CHECKING:
    from planner.compute import Context

#: Output tile of a BF16/FP16 tensor-core GEMM kernel (CUTLASS/cuBLAS Ampere and Hopper kernels use
#: 128×128 and 128×256 CTA tiles; NVIDIA "Matrix Multiplication Background User's Guide", §§2-3): the
#: tiles ⌈M/128⌉·⌈N/128⌉ run in waves over the SMs (``catalog.SM_COUNT``, one CTA per SM), and a
#: partial last wave or a padded edge tile does no useful work.
TILE = (128, 128)
#: Achieved fraction of the datasheet HBM bandwidth by bytes moved per kernel (Calculon,
#: calculon-ai/calculon systems/a100_80g.json and h100_80g_nvl8.json ``mem1.MB_efficiency``):
#: (lower bound in bytes, efficiency), largest first.
HBM_EFFICIENCY = ((100e6, 0.90), (10e6, 0.75), (1e6, 0.60), (0.0, 0.30))
#: FlashAttention-2 forward+backward, causal, BF16, TFLOP/s by sequence length (batch·seq = 16k,
#: hidden 2048), with FlashAttention's causal FLOP count (half the square): Dao-AILab/flash-attention
#: ``assets/flash2_a100_fwd_bwd_benchmark.png`` (head dim 64 and 128) and
#: ``assets/flash2_h100_fwd_bwd_benchmark.png`` (head dim 128), by GPU family and head dim.
FLASH_CAUSAL_TFLOPS: dict[tuple[str, int], tuple[tuple[int, float], ...]] = {
    ("a100", 64): ((512, 88), (1024, 119), (2048, 140), (4096, 156), (8192, 165), (16384, 171)),
    ("a100", 128): ((512, 99), (1024, 133), (2048, 155), (4096, 173), (8192, 182), (16384, 189)),
    ("h100", 128): ((512, 163), (1024, 221), (2048, 265), (4096, 294), (8192, 308), (16384, 328)),
}
#: H200 has H100's SMs and clocks (catalog): it uses H100's attention rates.
FLASH_FAMILY = {"a100": "a100", "h100": "h100", "h200": "h100"}
#: Dense BF16 peak (TFLOP/s) of the part each ``FLASH_CAUSAL_TFLOPS`` table was measured on (A100 SXM4,
#: H100 SXM5 datasheets): a GPU of the family with another tensor clock (e.g. a power-capped part,
#: ``catalog``) gets the table × its peak ÷ this.
FLASH_REFERENCE_PEAK = {"a100": 312.0, "h100": 989.4}


@lru_cache(maxsize=4096)
def hbm_efficiency(nbytes: float) -> float:
    return next(eff for lo, eff in HBM_EFFICIENCY if nbytes >= lo)


def hbm_time(ctx: Context, nbytes: float) -> float:
    """Seconds to move ``nbytes`` in one kernel at the achieved HBM bandwidth for that size. A host device's
    bandwidth is already an achieved rate (``runtime.report.host_spec``: a 64 MiB copy; smaller transfers
    stay in its caches), so no GPU size curve applies to it."""
    eff = 1.0 if runs_on_host(ctx) else hbm_efficiency(nbytes)
    return nbytes / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * eff) if nbytes > 0 else 0.0


def wave_efficiency(m: int, n: int, sms: int | None, batch: int = 1) -> float:
    """Useful fraction of the tensor-core work of an M×N output (``batch`` of them in one kernel) tiled
    by ``TILE`` and scheduled in waves over ``sms`` SMs: (M·N ÷ padded tiles' area) × (tiles ÷ waves·SMs).
    1.0 when the SM count is unknown."""
    tm, tn = TILE
    gm, gn = -(-m // tm), -(-n // tn)
    pad = (m * n) / (gm * tm * gn * tn)
    if sms is None:
        return pad
    tiles = gm * gn * batch
    waves = -(-tiles // sms)
    return pad * tiles / (waves * sms)


def gemm_time(ctx: Context, m: int, n: int, k: int, count: int = 1, batched: bool = False) -> float:
    """Seconds of ``count`` M×N×K GEMMs (one batched kernel when ``batched``): the larger of their FLOPs at
    the large-GEMM ceiling × the wave/tile efficiency, and their operand and result bytes at achieved HBM."""
    sms = ctx.sm_count
    if batched:
        eff, calls = wave_efficiency(m, n, sms, count), 1
    else:
        eff, calls = wave_efficiency(m, n, sms), count
    if runs_on_host(ctx):  # the host's rate is an achieved matmul rate (host_spec), not tensor-core tiles
        eff = 1.0 / ctx.gemm_efficiency
    fl = 2.0 * m * n * k * count
    by = (m * k + k * n + m * n) * ctx.elt * count
    return max(fl / (ctx.peak * ctx.gemm_efficiency * eff), calls * hbm_time(ctx, by / calls))


def gemm_shapes(model: ModelSpec, kind: str, tokens: int, tp: int) -> list[tuple[int, int, int, int]]:
    """Forward linear-layer GEMMs (M, N, K, count) of one layer on one TP rank (the attention core is
    priced by its kernel: ``attention_time``)."""
    h, hd = model.hidden_size, model.head_dim
    if kind == "transformer_block":
        q, kv, f = model.num_attention_heads * hd // tp, model.num_kv_heads * hd // tp, model.ffn_hidden_size // tp
        out = [(tokens, q, h, 1), (tokens, kv, h, 2), (tokens, h, q, 1), (tokens, f, h, 1), (tokens, h, f, 1)]
        if model.activation == "swiglu":
            out.append((tokens, f, h, 1))
        return out
    if kind == "lm_head":
        vocab = model.vocab_size // tp if model.vocab_size % tp == 0 else model.vocab_size
        return [(tokens, vocab, h, 1)]
    return []


def linear_times(ctx: Context, kind: str, tokens: int, tp: int) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of the layer's linear GEMMs: forward Y = X·W (M×N×K);
    backward the data gradient (M×K×N) and the weight gradient (K×N×M, reduced over the tokens)."""
    f = b = flops = 0.0
    for m, n, k, c in gemm_shapes(ctx.model, kind, tokens, tp):
        f += gemm_time(ctx, m, n, k, c)
        b += gemm_time(ctx, m, k, n, c) + gemm_time(ctx, k, n, m, c)
        flops += 2.0 * m * n * k * c
    return f, b, flops


def op_bytes(ctx: Context) -> tuple[float, float, float]:
    """Forward HBM bytes per element of (norm, SwiGLU product per FFN element, RoPE per q/k element) under
    the stack's ``kernels``. ``fused`` (Transformer Engine / apex / Megatron kernels): each reads its input
    and writes its output once — norm 2e, SwiGLU 3e (read both halves, write one), RoPE 2e. ``eager``
    (one PyTorch kernel per op, each reading and writing its operands; runtime/models/transformer.py):
    composite RMSNorm (torchtitan's; the bundled runtime's RMSNorm is ``F.rms_norm``'s fused kernel, so its
    preset sets ``norm_kernel = "fused"``) = to-fp32 (e + 4), pow (8), mean (4), x·rstd (8), ·weight (8), cast back (4 + e) = 32 + 2e; SwiGLU = silu (2e) + product (3e) = 5e; RoPE = to-fp32 (e + 4), four
    products on halves (16), two sums on halves (12), stack (8), cast back (4 + e) = 44 + 2e. LayerNorm and
    GELU are single native kernels in both (2e). ``compiled`` (``torch.compile`` of each block, as
    torchtitan's ``training.compile``: Inductor fuses each chain of pointwise ops and reductions into one
    kernel that reads its inputs and writes its outputs once, torch/_inductor/scheduler.py): the fused
    figures, and each residual add fused into the norm that reads its result (``elementwise_bytes``).
    The stack's ``norm_kernel`` overrides the norm alone (e.g. torchtitan's Triton ``fused_rmsnorm``)."""
    e = ctx.elt
    st = ctx.stack
    eager_norm = 32.0 + 2 * e if ctx.model.norm == "rmsnorm" else 2.0 * e
    norm = 2.0 * e if st.norm_fused else eager_norm
    if st.kernels in ("fused", "compiled"):
        return norm, 3.0 * e, 2.0 * e
    # torchtitan's eager RoPE (``apply_rotary_emb``: to fp32 (e + 4), one complex product (4 + 4), cast
    # back (4 + e)) is 16 + 2e; the bundled runtime's rotate-half RoPE 44 + 2e (above)
    rope = 16.0 + 2 * e if st.activations == "titan" else 44.0 + 2 * e
    return norm, 5.0 * e, rope


def elementwise_bytes(ctx: Context, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """HBM bytes moved by the memory-bound (non-GEMM) ops of one forward pass, attention excluded
    (per-element costs: ``op_bytes``)."""
    m, e = ctx.model, ctx.elt
    tokens = mbs * ctx.training.seq_len
    stream = tokens // tp if sp else tokens  # residual-stream tokens on this rank
    h = m.hidden_size
    norm, glu, rope = op_bytes(ctx)
    if kind == "embedding":
        return 2.0 * stream * h * e  # gather + write
    if kind == "lm_head":
        vocab = m.vocab_size // tp if m.vocab_size % tp == 0 else m.vocab_size
        return norm * stream * h + 3.0 * tokens * vocab * 4  # final norm; fp32 softmax cross-entropy
    f = m.ffn_hidden_size // tp
    b = 2 * norm * stream * h + 2 * 3 * stream * h * e  # two norms, two residual adds (read 2, write 1)
    if ctx.stack.kernels == "compiled":
        b -= stream * h * e  # the first add fused into the MLP norm: its sum is not read back
    b += (glu if m.activation == "swiglu" else 2 * e) * tokens * f
    if m.family == "llama":
        b += rope * tokens * (m.num_attention_heads + m.num_kv_heads) * m.head_dim // tp  # RoPE on q, k
    if ctx.stack.activations == "titan" and m.num_kv_heads < m.num_attention_heads:
        # torchtitan's repeat_kv (expand + reshape) copies K and V to the query heads before SDPA
        b += 2 * tokens * (m.num_kv_heads + m.num_attention_heads) * m.head_dim // tp * e
    if ctx.stack.dropout:
        # two hidden dropouts: fused with the residual add (apex/TE bias-dropout-add) they only write their
        # 1-byte masks; eager (``torch.nn.Dropout``, one kernel each) they also read and write the tensor
        b += 2 * stream * h * (1 if ctx.stack.kernels == "fused" else 2 * e + 1)
    return float(b)


def elementwise_time(ctx: Context, kind: str, mbs: int, tp: int, sp: bool) -> float:
    """Forward seconds of the memory-bound ops, each kernel moving about one residual-stream tensor in and out."""
    nbytes = elementwise_bytes(ctx, kind, mbs, tp, sp)
    stream = mbs * ctx.training.seq_len // (tp if sp else 1)
    return nbytes / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(2 * stream * ctx.model.hidden_size * ctx.elt))


def attention_core_flops(model: ModelSpec, mbs: int, seq: int, tp: int) -> float:
    return 4.0 * mbs * seq * seq * model.head_dim * model.num_attention_heads / tp


def flash_rate(ctx: Context, head_dim: int, seq: int) -> float | None:
    """FlashAttention-2 causal fwd+bwd TFLOP/s (FA's causal count) on this GPU, interpolated in log(seq)
    and clamped to the table; None when no published table covers the GPU."""
    fam = FLASH_FAMILY.get(ctx.gpu.id.lower()[:4])
    if fam is None or ctx.training.precision == "fp32":
        return None
    dims = sorted(d for f, d in FLASH_CAUSAL_TFLOPS if f == fam)
    d = next((x for x in dims if x >= head_dim), dims[-1])
    table = FLASH_CAUSAL_TFLOPS[(fam, d)]
    clock = ctx.gpu.peak_flops("bf16") / 1e12 / FLASH_REFERENCE_PEAK[fam]
    if seq <= table[0][0]:
        return clock * table[0][1] * seq / table[0][0]  # below the table: shorter kernels, proportionally slower
    for (s0, r0), (s1, r1) in zip(table, table[1:]):
        if seq <= s1:
            w = math.log(seq / s0) / math.log(s1 / s0)
            return clock * (r0 + w * (r1 - r0))
    return clock * table[-1][1]


def attention_time(ctx: Context, mbs: int, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core (QKᵀ, softmax, dropout, PV) of one block on one
    TP rank, by the stack's kernel (``planner.stacks``):

    * flash: the model's full-square FLOPs (4·b·s²·d·a/t forward, 2.5× backward) at the published
      FlashAttention-2 causal rate for (GPU, head dim, s) — which counts half the square, so the time is
      (FLOPs ÷ 2) ÷ rate; GPUs without a published table fall back to the two GEMMs at the GEMM ceiling;
    * unfused: the two batched GEMMs per direction (QKᵀ, PV forward; four in backward) on their rooflines,
      plus the b·(a/t)·s² scores read and written in HBM by the softmax (forward: read + write; backward:
      read probabilities and gradient, write gradient) and, with dropout, by the dropout (read, write, and a
      1-byte mask; backward: read gradient and mask, write); with ``eager`` kernels the causal mask is its
      own pass over the scores (``masked_fill_``: read + write, both ways; Megatron-LM 2020
      ``gpt2_attention_mask_func``) instead of part of a fused scale-mask-softmax; and the context is copied
      back from [b, a, s, d] to [b, s, a·d] (``permute(...).contiguous()``: read + write, both ways)."""
    m, seq = ctx.model, ctx.training.seq_len
    d, heads = m.head_dim, mbs * m.num_attention_heads // tp
    if heads == 0:
        return 0.0, 0.0
    flops = attention_core_flops(m, mbs, seq, tp)
    if ctx.stack.attention == "flash":
        rate = flash_rate(ctx, d, seq)
        if rate is not None:
            total = (1 + FLASH_BWD_RATIO) * flops / 2 / (rate * 1e12)
            return total / (1 + FLASH_BWD_RATIO), total * FLASH_BWD_RATIO / (1 + FLASH_BWD_RATIO)
        fwd = gemm_time(ctx, seq, seq, d, heads, True) + gemm_time(ctx, seq, d, seq, heads, True)
        return fwd, FLASH_BWD_RATIO * fwd
    fwd = gemm_time(ctx, seq, seq, d, heads, True) + gemm_time(ctx, seq, d, seq, heads, True)
    bwd = gemm_time(ctx, seq, seq, d, heads, True) + 3 * gemm_time(ctx, seq, d, seq, heads, True)
    scores = heads * seq * seq
    e = ctx.elt
    fwd += hbm_time(ctx, 2 * scores * e)
    bwd += hbm_time(ctx, 3 * scores * e)
    if ctx.stack.kernels == "eager":  # the causal mask by its own kernel over the scores (masked_fill_), both ways
        fwd += hbm_time(ctx, 2 * scores * e)
        bwd += hbm_time(ctx, 2 * scores * e)
    context = heads * seq * d * e  # the context [b, a, s, d] permuted back to [b, s, a·d] (a contiguous copy)
    fwd += hbm_time(ctx, 2 * context)
    bwd += hbm_time(ctx, 2 * context)
    if ctx.stack.dropout:
        fwd += hbm_time(ctx, 2 * scores * e + scores)
        bwd += hbm_time(ctx, 2 * scores * e + scores)
    return fwd, bwd


# ------------------------------------------------------------------------------------------------
# Kernels launched (the ``kernel_overhead_us`` residual acts per kernel)

#: Devices whose host runs the ops itself (no asynchronous launch queue): a GpuSpec id starting with one
#: of these (``runtime.report.host_spec`` names the host ``cpu``).
HOST_DEVICES = ("cpu",)
#: FlashAttention-2 kernels per call: forward 1; backward 3 (the dO·O row-sum preprocessing, the main
#: backward kernel and the dQ accumulator conversion: Dao-AILab/flash-attention
#: ``csrc/flash_attn/src/flash_bwd_launch_template.h``).
FLASH_KERNELS = (1, 3)


def runs_on_host(ctx: Context) -> bool:
    """Whether the "GPU" is the host's processor: every kernel's launch overhead then adds to its time."""
    return ctx.gpu.id.lower().startswith(HOST_DEVICES)


def op_kernels(ctx: Context) -> tuple[int, int, int]:
    """Forward kernels of (a norm, the activation of one FFN, RoPE on one tensor) under the stack's
    ``kernels``, from the op list ``op_bytes`` prices: fused kernels (``fused``: TE/apex; any other
    non-eager kind, e.g. compiled chains) one each; ``eager`` composite RMSNorm 6 (to-fp32, pow, mean,
    x·rstd, ·weight, cast back), SwiGLU 2 (silu, product), RoPE 9 (to-fp32, four products, two sums,
    stack, cast back; a complex-product RoPE as torchtitan's 3: to-fp32, product, cast back); LayerNorm and
    GELU are one native kernel in both. A stack whose norms are fused on their own (``norm_fused``) counts
    one per norm."""
    m, st = ctx.model, ctx.stack
    fused = st.kernels != "eager"
    norm = 1 if bool(getattr(st, "norm_fused", fused)) or m.norm != "rmsnorm" else 6
    act = 1 if fused or m.activation != "swiglu" else 2
    rope = 1 if fused else (3 if getattr(st, "activations", None) == "titan" else 9)
    return norm, act, rope


def kernel_counts(ctx: Context, kind: str, tp: int) -> tuple[int, int]:
    """(forward, backward) kernels one layer of ``kind`` issues per micro-batch, counted from the ops the
    per-op model prices: each linear GEMM call (``gemm_shapes``; backward: data and weight gradient), the
    attention core by the stack's kernel (flash: ``FLASH_KERNELS``; unfused: QKᵀ, softmax, [dropout], PV
    forward, four batched GEMMs and the softmax [and dropout] backward), and the memory-bound ops of
    ``elementwise_bytes`` (``op_kernels``; two residual adds with the dropout fused into them — one when
    compiled chains fuse an add into the next norm —, a K/V repeat copy each for K and V where the stack
    repeats them (torchtitan's ``repeat_kv``), embedding gather, fp32 cross-entropy in 3 kernels), whose
    backward issues twice the forward's kernels as it moves twice their bytes. Communication kernels are
    priced by ``planner.comm``, not here."""
    m, st = ctx.model, ctx.stack
    gemms = sum(c for *_, c in gemm_shapes(m, kind, 1, tp))
    norm, act, rope = op_kernels(ctx)
    att_f = att_b = 0
    if kind == "transformer_block":
        adds = 1 if str(st.kernels) == "compiled" else 2
        repeat = 2 if getattr(st, "activations", None) == "titan" and m.num_kv_heads < m.num_attention_heads else 0
        elem = 2 * norm + adds + act + (2 * rope if m.family == "llama" else 0) + repeat
        if st.attention == "flash":
            att_f, att_b = FLASH_KERNELS
        else:
            drop = 1 if st.dropout else 0
            att_f, att_b = 3 + drop, 5 + drop
    elif kind == "embedding":
        elem = 1
    elif kind == "lm_head":
        elem = norm + 3
    else:
        elem = 0
    return gemms + att_f + elem, 2 * gemms + att_b + 2 * elem


#: Host CPU time to launch one CUDA kernel from eager PyTorch: about 4–6 µs (susun-blog.com, "pegainfer
#: (3)": kernels shorter than that leave the GPU idle unless CUDA graphs are used); the low end, as a
#: floor. Not charged on a host device, whose per-op cost is the ``kernel_overhead_us`` residual alone.
GPU_LAUNCH_US = 4.0


def with_launches(ctx: Context, device_s: float, kernels: int) -> float:
    """Seconds of ``kernels`` kernels that keep the device busy ``device_s``, with ``GPU_LAUNCH_US`` (GPUs)
    plus the ``kernel_overhead_us`` residual per kernel: on a GPU launches are asynchronous, so the host's
    launches overlap the device's work and the span is max(device, kernels × overhead) (host-bound when the
    kernels are small); on a host device (``runs_on_host``) the processor that launches an op also runs it,
    so they add."""
    on_host = runs_on_host(ctx)
    host = kernels * ((0.0 if on_host else GPU_LAUNCH_US) + ctx.residuals.kernel_overhead_us) * 1e-6
    return device_s + host * host_slowdown(ctx) if on_host else max(device_s, host)


def host_slowdown(ctx: Context) -> float:
    """How much longer a rank's host work takes than alone on a core: 1/``HostDispatch.cpu_share`` on a host
    device whose ranks share its cores (more single-thread ranks than cores: the scheduler time-slices them
    fairly), else 1. The measured inputs of such a run arrive already scaled (``runtime.report``); this
    scales the residuals fitted per rank alone (``kernel_overhead_us``, ``step_overhead_s``)."""
    hd = host_dispatch(ctx)
    return 1.0 / hd.cpu_share if hd is not None and hd.cpu_share else 1.0


# ------------------------------------------------------------------------------------------------
# Host dispatch by class (a CPU "GPU" with measured ``GpuSpec.host_dispatch``)


def host_dispatch(ctx: Context) -> HostDispatch | None:
    """The host's measured dispatch costs when the "GPU" is the host's processor (``runs_on_host``) and
    ``meshplan run`` measured them (``runtime.host_dispatch``); None otherwise (every GPU: identity)."""
    return ctx.gpu.host_dispatch if runs_on_host(ctx) else None


def block_linears(model: ModelSpec) -> int:
    """The ``nn.Linear`` modules of one transformer block of the bundled runtime (``runtime.models``):
    wq, wk, wv, wo, w1, w2 (+ w3 for SwiGLU) — each a ColwiseParallel/RowwiseParallel DTensor linear under TP."""
    return 7 if model.activation == "swiglu" else 6


def param_tensors(model: ModelSpec, kind: str) -> tuple[int, int]:
    """(parameter tensors, of which in TP-sharded linears) of one layer of ``kind`` in the bundled runtime:
    a block's two norms (weight, + bias for LayerNorm) and its linears (weight, + bias: every linear of a
    GPT, Q/K/V of a ``qkv_bias`` model); the embedding's token (+ GPT's position) table; the LM head's
    final norm and weight. The optimizer steps each tensor with its own ops (AdamW's per-tensor loop)."""
    norm = 2 if model.norm == "layernorm" else 1
    if kind == "transformer_block":
        lin = block_linears(model)
        bias = lin if model.family == "gpt" else (3 if model.qkv_bias else 0)
        return 2 * norm + lin + bias, lin + bias
    if kind == "embedding":
        return (2 if model.family == "gpt" else 1), 0
    if kind == "lm_head":
        return norm + 1, 0
    return 0, 0


def host_fsdp_hooks(ctx: Context, kind: str) -> tuple[float, float]:
    """(forward, backward) seconds of the FSDP2 hooks (``replicate``/``fully_shard``) of one layer of ``kind``
    per micro-batch on a host: the bundled runtime wraps every block and the chunk (whose own tensors are the
    embedding's and the LM head's; its module part is counted with the embedding), each wrapped module
    costing its part plus a part per parameter tensor it holds (``param_tensors``; measured). Zero without a
    measurement; older measurements without the per-tensor part priced per module alone."""
    hd = host_dispatch(ctx)
    if hd is None:
        return 0.0, 0.0
    n = param_tensors(ctx.model, kind)[0]
    module = 0 if kind == "lm_head" else 1
    per_f, per_b = hd.fsdp_param_fwd_us or 0.0, hd.fsdp_param_bwd_us or 0.0
    return (module * hd.fsdp_module_fwd_us + n * per_f) * 1e-6, (module * hd.fsdp_module_bwd_us + n * per_b) * 1e-6


def host_layer_dispatch(ctx: Context, kind: str, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of host dispatch one layer of ``kind`` adds per micro-batch beyond its
    ops' compute: every op the per-op model counts (``kernel_counts`` forward ops, each with autograd and
    a backward) at the measured plain-op cost. Zero without a measurement (``host_dispatch``)."""
    hd = host_dispatch(ctx)
    if hd is None:
        return 0.0, 0.0
    ops, _ = kernel_counts(ctx, kind, tp)
    return ops * hd.op_fwd_us * 1e-6, ops * hd.op_bwd_us * 1e-6
