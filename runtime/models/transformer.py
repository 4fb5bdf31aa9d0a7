"""The model zoo: one decoder-only transformer covering the GPT and Llama families.

Module names are a contract (``planner.specs.layout.tp_plan`` matches them, checkpoints are keyed by them):
``embed.tok`` (+ ``embed.pos`` for GPT), ``layers.<i>.{attn_norm, attn.{wq,wk,wv,wo,core}, mlp_norm,
mlp.{w1,w2[,w3]}}`` (latent attention, ``runtime.models.mla``: ``attn.{wq_a,q_norm,wq_b | wq, wkv_a,kv_norm,
wkv_b,wo,core}``), ``norm``, ``head``. Any of ``embed``/``norm``/``head`` may be ``None`` (a
pipeline stage); ``forward`` skips them.

Initialisation is deterministic per parameter *name* (a generator seeded from ``seed`` and the
name), so a full model, a pruned pipeline stage or a model materialised from the meta device all
start from identical weights whatever the parallel layout.
"""

from __future__ import annotations

import math
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from planner.specs import ModelSpec

ROPE_THETA = 10_000.0
NORM_EPS = 1e-5
INIT_STD = 0.02


#: Devices where ``F.rms_norm`` runs PyTorch's fused kernel (``aten._fused_rms_norm``, pytorch/pytorch#153666):
#: one kernel each way, and autograd keeps only the input and the fp32 1/rms.
FUSED_RMS_NORM_DEVICES = frozenset({"cuda"})


class _RMSNormFunction(torch.autograd.Function):
    """RMSNorm with the fused kernel's maths *and* saved tensors where PyTorch has no fused kernel (CPU in
    torch 2.13: ``F.rms_norm`` decomposes there into upcast/pow/mean/rsqrt/mul and keeps the fp32 input, the
    fp32 normalised input and 1/rms). Forward: ``aten._fused_rms_norm`` (output, fp32 1/rms) under no grad;
    backward: PyTorch's own decomposition of ``aten._fused_rms_norm_backward``. Keeps the input (activation
    dtype) and 1/rms (fp32) per token, exactly what the CUDA kernel's autograd keeps. Works on DTensors
    (sequence-parallel norms): both ops have DTensor sharding rules."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        out, rstd = torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, eps)
        ctx.save_for_backward(x, rstd, weight)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        from torch._decomp.decompositions import _fused_rms_norm_backward

        x, rstd, weight = ctx.saved_tensors
        mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[1]]
        gx, gw = _fused_rms_norm_backward(grad, x, [x.shape[-1]], rstd, weight, mask)
        return gx, gw, None


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019) that keeps only its input and the fp32 1/rms for backward on every
    device: PyTorch's fused kernel on CUDA, ``_RMSNormFunction`` elsewhere. Same parameter name
    (``weight``) and state dict as ``nn.RMSNorm``."""

    def __init__(self, dim: int, eps: float = NORM_EPS) -> None:
        super().__init__()
        self.normalized_shape = (dim,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type in FUSED_RMS_NORM_DEVICES:
            return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
        return _RMSNormFunction.apply(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


def _norm(spec: ModelSpec, dim: int) -> nn.Module:
    return nn.LayerNorm(dim, eps=NORM_EPS) if spec.norm == "layernorm" else RMSNorm(dim, eps=NORM_EPS)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021) on ``x`` of shape [B, T, heads, head_dim]; ``positions``
    [T] are the tokens' positions in the sequence (default 0..T-1; context parallelism gives its own)."""
    _, t, _, hd = x.shape
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
    pos = torch.arange(t, device=x.device) if positions is None else positions
    angles = torch.outer(pos.to(torch.float32), inv_freq)  # [T, hd/2]
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    xf = x.float().unflatten(-1, (hd // 2, 2))
    x1, x2 = xf[..., 0], xf[..., 1]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.type_as(x)


class Attention(nn.Module):
    """Parameter-free causal attention core (the target of selective recomputation). Grouped-query
    attention runs on the K/V heads as they are (``enable_gqa``: each K/V head serves q_heads/kv_heads
    query heads inside the kernel), so K and V are neither repeated to the query-head count nor kept at
    that size for backward. The flash kernels take GQA natively: CUDA's for fp16/bf16 (the runtime's CUDA
    precision, FSDP2 mixed precision) and CPU's. CUDA in fp32 has no GQA-capable fused kernel (the
    memory-efficient one lacks it; math would keep the s×s probabilities), so there K/V are repeated.
    Under context parallelism (``cp``: ``runtime.context_parallel.CPContext``) the context's exchange runs it.
    ``window``: a sliding-window layer's (``ModelSpec.sliding_window``), run with ``banded_causal_mask``."""

    cp = None

    def __init__(self, window: int | None = None) -> None:
        super().__init__()
        self.window = window

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.cp is not None:
            if sinks is not None:  # runtime.validate refuses it first (parallel.cp)
                raise NotImplementedError("attention sinks under context parallelism")
            return self.cp.attention(q, k, v, self.window)  # a window: in the exchange's position mask
        scale, t = None, q.shape[2]
        if sinks is not None:
            q, k, v, scale = with_sink_key(q, k, v, sinks)
        rep = q.shape[1] // k.shape[1]  # [B, heads, T, head_dim]
        if rep > 1 and q.device.type == "cuda" and q.dtype == torch.float32:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        gqa = k.shape[1] != q.shape[1]
        if self.window is not None and self.window < t:
            mask = banded_causal_mask(t, self.window, sink=sinks is not None, device=q.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa, scale=scale)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa, scale=scale)
        return out if sinks is None else out[:, :, 1:, : out.shape[-1] - SINK_PAD]


def banded_causal_mask(t: int, window: int, *, sink: bool = False, device=None) -> torch.Tensor:
    """SDPA's boolean mask (True: attend) of a sliding window over ``t`` tokens: query i sees keys j with
    i − window < j ≤ i (transformers' ``sliding_window_overlay`` on its causal mask), min(i + 1, window) of them.
    ``sink``: for ``with_sink_key``'s layout (a dummy query and the sink key first): every row also sees key 0, the
    sink, which stays in every window (gpt-oss: the sink joins each softmax's denominator)."""
    i = torch.arange(t, device=device)
    mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    if sink:
        mask = F.pad(mask, (1, 0, 1, 0), value=False)
        mask[:, 0] = True
    return mask


#: Head-dimension padding of the sink key trick (``with_sink_key``): one column carries the sink logit, the rest keep
#: the head dimension a multiple of 8 for the fused kernels.
SINK_PAD = 8


def with_sink_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor):
    """Attention sinks (gpt-oss: a learned logit per query head joining every softmax's denominator, its value 0)
    as ordinary causal SDPA, so the fused kernels run it and autograd reaches the sinks. An extra key with value 0
    goes first, and one extra head-dimension column carries the sink: q's column is sink_h / scale (per query head,
    so GQA groups keep their own sinks), k's is 1 for the sink key and 0 for the real ones; so the sink key's logit
    is exactly sink_h and a real key's is q·k·scale with the original scale. A dummy query goes first too, so the
    causal mask (top-left aligned) lets query i see the sink and keys 0..i; its output row and the padding columns
    are dropped (``Attention.forward``). Returns q', k', v' [B, heads, T+1, head_dim + SINK_PAD] and the scale."""
    b, h, t, d = q.shape
    scale = 1.0 / math.sqrt(d)
    pad = SINK_PAD - 1
    sink_col = (sinks.to(q.dtype) / scale).view(1, h, 1, 1).expand(b, h, t + 1, 1)
    q2 = torch.cat((F.pad(q, (0, 0, 1, 0)), sink_col, q.new_zeros(b, h, t + 1, pad)), dim=-1)
    kh = k.shape[1]
    sink_key = torch.cat((k.new_zeros(b, kh, 1, d), k.new_ones(b, kh, 1, 1)), dim=-1)
    k2 = torch.cat((torch.cat((sink_key, F.pad(k, (0, 1))), dim=2), k.new_zeros(b, kh, t + 1, pad)), dim=-1)
    v2 = F.pad(v, (0, SINK_PAD, 1, 0))
    return q2, k2, v2, scale


class _ShardedRMSNorm(torch.autograd.Function):
    """RMSNorm of a row split over a group's ranks (each holds a slice of its columns and of the weight): the sum of
    squares all-reduced forward, and Σ grad·x backward (x_j's gradient is r·g_j − r³·x_j·Σ_i g_i·x_i / n, the sum over
    the whole row). Keeps what the fused kernel keeps — the input in its dtype and the fp32 1/rms — rather than
    composite autograd's fp32 copy of the input and the normalised input."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, n: int, eps: float, group) -> torch.Tensor:
        import torch.distributed as dist

        xf = x.float()
        squares = xf.pow(2).sum(-1, keepdim=True)
        dist.all_reduce(squares, group=group)
        rstd = torch.rsqrt(squares / n + eps)
        ctx.save_for_backward(x, w, rstd)
        ctx.n, ctx.group = n, group
        return (xf * rstd).type_as(x) * w

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        import torch.distributed as dist

        x, w, rstd = ctx.saved_tensors
        xf = x.float()
        grad_w = (grad * (xf * rstd).type_as(x)).reshape(-1, w.shape[-1]).sum(0).to(w.dtype)
        g = (grad * w).float()
        dot = (g * xf).sum(-1, keepdim=True)
        dist.all_reduce(dot, group=ctx.group)
        grad_x = rstd * g - xf * rstd.pow(3) * dot / ctx.n
        return grad_x.type_as(x), grad_w, None, None, None


class ProjectionRMSNorm(RMSNorm):
    """QK-norm over a whole projection (OLMoE's ``q_norm``/``k_norm``: RMSNorm of heads·head_dim, resp.
    kv_heads·head_dim, before the heads are split). Under TP each rank holds its heads' slice of the projection and
    of ``weight`` (a ``Shard(0)`` DTensor on the TP mesh, ``runtime.parallelize.apply_attention_tp``, which sets
    ``tp_group``): the mean square then needs every rank's sum of squares, all-reduced, and the backward the row's
    Σ grad·x (``_ShardedRMSNorm``, keeping the fused kernel's saved set). Without TP it is the fused ``RMSNorm``."""

    tp_group = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_group is None:
            return super().forward(x)
        w = self.weight.to_local() if hasattr(self.weight, "to_local") else self.weight
        return _ShardedRMSNorm.apply(x, w, self.normalized_shape[0], self.eps, self.tp_group)


class SelfAttention(nn.Module):
    """Causal self-attention. Optional parts (``ModelSpec``): biases on Q/K/V (``qkv_bias``) and on the output
    (``attention_out_bias``); QK-norm (``qk_norm``: ``"head"`` — Qwen3, one RMSNorm of head_dim over each query and
    key head, weights shared by the heads; ``"projection"`` — OLMoE, an RMSNorm over the whole query and key
    projections), applied before RoPE; attention sinks (``attention_sinks``: gpt-oss, ``sinks`` one logit per query
    head, ``with_sink_key``); a sliding window (``window``: the layer's, ``ModelSpec.is_window_layer``)."""

    cp = None  # context parallelism: RoPE at the local tokens' global positions

    def __init__(self, spec: ModelSpec, *, tp: int = 1, window: int | None = None) -> None:
        super().__init__()
        d, hd, bias = spec.hidden_size, spec.head_dim, spec.family == "gpt"
        qkv_bias = bias or spec.qkv_bias  # Qwen2/2.5: biases on Q, K, V only
        heads, kv = spec.num_attention_heads // tp, spec.num_kv_heads // tp
        self.head_dim = hd
        self.rope = spec.family == "llama"
        self.wq = nn.Linear(d, heads * hd, bias=qkv_bias)
        self.wk = nn.Linear(d, kv * hd, bias=qkv_bias)
        self.wv = nn.Linear(d, kv * hd, bias=qkv_bias)
        self.wo = nn.Linear(heads * hd, d, bias=bias or spec.attention_out_bias)
        self.qk_norm = spec.qk_norm
        self.q_norm: nn.Module | None = None
        self.k_norm: nn.Module | None = None
        if spec.qk_norm == "head":
            self.q_norm, self.k_norm = RMSNorm(hd, eps=NORM_EPS), RMSNorm(hd, eps=NORM_EPS)
        elif spec.qk_norm == "projection":
            self.q_norm, self.k_norm = (
                ProjectionRMSNorm(heads * hd, eps=NORM_EPS),
                ProjectionRMSNorm(kv * hd, eps=NORM_EPS),
            )
        self.sinks = nn.Parameter(torch.zeros(heads)) if spec.attention_sinks else None
        self.core = Attention(window)  # window: this layer's sliding window (Block: ModelSpec.is_window_layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.q_norm is not None and self.k_norm is not None and self.qk_norm == "projection":
            q, k = self.q_norm(q), self.k_norm(k)
        # -1: the local head count, so TP-sharded (fewer heads) projections just work.
        q, k, v = (y.view(b, t, -1, self.head_dim) for y in (q, k, v))
        if self.q_norm is not None and self.k_norm is not None and self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)  # [B, T, heads, head_dim]: per head
        if self.rope:
            pos = None if self.cp is None else self.cp.positions(t, x.device)
            q, k = apply_rope(q, pos), apply_rope(k, pos)
        sinks = self.sinks
        if sinks is not None and hasattr(sinks, "to_local"):  # TP: this rank's heads' sinks
            sinks = sinks.to_local()
        args = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        out = self.core(*args) if sinks is None else self.core(*args, sinks)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """The dense MLP (``ffn``: its width, default the spec's ``ffn_hidden_size``; a MoE layer's shared expert)."""

    def __init__(self, spec: ModelSpec, *, tp: int = 1, ffn: int | None = None) -> None:
        super().__init__()
        d, bias = spec.hidden_size, spec.family == "gpt"
        ffn = (spec.ffn_hidden_size if ffn is None else ffn) // tp
        self.swiglu = spec.activation == "swiglu"
        self.w1 = nn.Linear(d, ffn, bias=bias)
        self.w2 = nn.Linear(ffn, d, bias=bias)
        if self.swiglu:
            self.w3 = nn.Linear(d, ffn, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    """Pre-norm transformer block; takes and returns one tensor [B, T, d]. Layer ``index`` of a mixture of experts
    (``spec.is_moe_layer``) has a ``moe`` MLP (``runtime.models.moe.MoE``) instead of the dense ``mlp``."""

    def __init__(self, spec: ModelSpec, *, tp: int = 1, index: int = 0) -> None:
        super().__init__()
        self.attn_norm = _norm(spec, spec.hidden_size)
        if spec.mla is not None:  # latent attention (DeepSeek-V3): runtime/models/mla.py (no window: ModelSpec refuses)
            from runtime.models.mla import LatentAttention

            self.attn: nn.Module = LatentAttention(spec, tp=tp)
        else:
            window = spec.sliding_window if spec.is_window_layer(index) else None
            self.attn = SelfAttention(spec, tp=tp, window=window)
        self.mlp_norm = _norm(spec, spec.hidden_size)
        if spec.is_moe_layer(index):
            from runtime.models.moe import MoE

            self.moe: nn.Module | None = MoE(spec, tp=tp)
            self.mlp: nn.Module | None = None
        else:
            self.mlp, self.moe = FeedForward(spec, tp=tp), None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        mlp = self.mlp if self.mlp is not None else self.moe
        return x + mlp(self.mlp_norm(x))


class Embedding(nn.Module):
    """Token embedding, plus learned positions for GPT (at the local tokens' positions under context
    parallelism, ``cp``)."""

    cp = None

    def __init__(self, spec: ModelSpec, *, tp: int = 1) -> None:
        super().__init__()
        self.tok = nn.Embedding(spec.vocab_size // tp, spec.hidden_size)
        self.pos = nn.Embedding(spec.max_seq_len, spec.hidden_size) if spec.family == "gpt" else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids)
        if self.pos is not None:
            t = ids.shape[1]
            h = h + self.pos(
                torch.arange(t, device=ids.device) if self.cp is None else self.cp.positions(t, ids.device)
            )
        return h


class LMHead(nn.Module):
    """Final norm + output projection (the profiler's ``lm_head`` layer kind)."""

    def __init__(self, spec: ModelSpec, *, tp: int = 1) -> None:
        super().__init__()
        self.norm = _norm(spec, spec.hidden_size)
        self.head = nn.Linear(spec.hidden_size, spec.vocab_size // tp, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        self.embed: Embedding | None = Embedding(spec)
        self.layers = nn.ModuleDict({str(i): Block(spec, index=i) for i in range(spec.num_layers)})
        self.norm: nn.Module | None = _norm(spec, spec.hidden_size)
        self.head: nn.Linear | None = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_embeddings:
            self.head.weight = self.embed.tok.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) if self.embed is not None else x
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        if self.head is not None:
            h = self.head(h)
        return h


def _param_seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)


@torch.no_grad()
def init_weights(module: nn.Module, spec: ModelSpec, seed: int) -> None:
    """Seeded, name-keyed init (GPT-2 style): N(0, 0.02) for matrices and embeddings, scaled by
    1/sqrt(2L) on the residual outputs (wo, w2); norms 1 and biases 0. Works on plain tensors of any
    device (meta is skipped). Routed experts: each expert's slice seeded by its name and *global* expert index,
    so any expert-parallel split starts from the same weights; a MoE layer's expert bias and counts start at 0."""
    from runtime.models.moe import GroupedExperts, MoE

    residual_std = INIT_STD / math.sqrt(2 * spec.num_layers)
    seen: set[int] = set()
    for prefix, experts in module.named_modules():
        if isinstance(experts, MoE) and experts.expert_bias.device.type != "meta":
            experts.expert_bias.zero_()  # buffers too: ``to_empty`` leaves them uninitialised
            experts.tokens_per_expert.zero_()
        if isinstance(experts, GroupedExperts):  # each expert seeded by its global index: same under any EP split
            for leaf in experts.leaves:
                p = getattr(experts, leaf)
                seen.add(id(p))
                local = p.to_local() if hasattr(p, "to_local") else p
                if local.device.type == "meta":
                    continue
                if leaf.startswith("b"):  # the experts' biases (gpt-oss): 0, as every bias
                    local.zero_()
                    continue
                std = residual_std if leaf == "w2" else INIT_STD
                for j in range(local.shape[0]):
                    gen = torch.Generator(device="cpu").manual_seed(
                        _param_seed(seed, f"{prefix}.{leaf}.{experts.first + j}")
                    )
                    row = torch.randn(local.shape[1:], generator=gen, dtype=torch.float32).mul_(std)
                    local[j].copy_(row.to(local.dtype))
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in seen or p.device.type == "meta":
            continue
        seen.add(id(p))
        leaf = name.rsplit(".", 1)[-1]
        owner = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else ""
        if leaf == "bias":
            p.zero_()
        elif owner.endswith("norm"):
            p.fill_(1.0)
        else:
            std = residual_std if owner in ("wo", "w2") else INIT_STD
            gen = torch.Generator(device="cpu").manual_seed(_param_seed(seed, name))
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).mul_(std).to(p.dtype))


def check_buildable(spec: ModelSpec) -> None:
    """Refuse a spec the zoo cannot build as given rather than build a different model: latent attention with a value
    head wider than the query/key head (the zoo pads values to that width). The ``meshplan`` stack's ``unbuilt`` list
    (``planner.specs.stacks``) is empty: every other ModelSpec part is built (tests/test_runtime_attention_parts.py)."""
    from planner.specs.errors import MeshplanError

    mla = spec.mla
    if mla is not None and mla.v_head_dim > mla.qk_head_dim:
        raise MeshplanError(
            "model.mla.v_head_dim",
            f"the model zoo pads latent attention's values to the query/key head width (qk_nope_head_dim + "
            f"qk_rope_head_dim = {mla.qk_head_dim}) for the fused attention kernels; v_head_dim={mla.v_head_dim} "
            "is wider",
            f"set model.mla.v_head_dim to at most {mla.qk_head_dim}, or export the plan to megatron",
        )


def build_model(spec: ModelSpec, *, seed: int | None = None, device=None, dtype=None) -> Transformer:
    """The full model of ``spec``; with ``seed`` its weights are the layout-independent seeded init."""
    check_buildable(spec)
    with torch.device(device or "cpu"):
        model = Transformer(spec)
    if dtype is not None:
        model.to(dtype)
    if seed is not None:
        init_weights(model, spec, seed)
    return model


def build_layer(
    spec: ModelSpec, kind: str, *, tp: int = 1, seed: int | None = None, device=None, dtype=None
) -> nn.Module:
    """One layer of ``kind`` ("embedding", "transformer_block", "lm_head") at its TP-sharded width
    (heads/tp, kv_heads/tp, ffn/tp, vocab/tp), e.g. for the profiler."""
    from planner.specs.errors import MeshplanError

    check_buildable(spec)
    makers = {"embedding": Embedding, "transformer_block": Block, "lm_head": LMHead}
    if kind not in makers:
        raise MeshplanError("kind", f"unknown layer kind {kind!r}", f"use one of {', '.join(makers)}")
    if tp < 1:
        raise MeshplanError("tp", f"tp must be ≥ 1, got {tp}", "use a positive tensor-parallel degree")
    for field, value in (
        ("num_attention_heads", spec.num_attention_heads),
        ("num_kv_heads", spec.num_kv_heads),
        ("ffn_hidden_size", spec.ffn_hidden_size),
    ):
        if value % tp:
            raise MeshplanError(
                f"model.{field}", f"{field}={value} is not divisible by tp={tp}", "choose a tp that divides it"
            )
    with torch.device(device or "cpu"):
        layer = makers[kind](spec, tp=tp)
    if dtype is not None:
        layer.to(dtype)
    if seed is not None:
        init_weights(layer, spec, seed)
    return layer
