"""Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1) in the model zoo (``ModelSpec.mla``).

Semantics: Hugging Face transformers' ``DeepseekV3Attention`` (src/transformers/models/deepseek_v3/
modeling_deepseek_v3.py at commit f5a9ec512fa9fe69e51ea0c6388c68d50de567b3), parameter for parameter:

====================  ======================  ==========================================================
zoo (this module)     transformers            shape (``heads`` = this TP rank's heads)
====================  ======================  ==========================================================
``wq_a``              ``q_a_proj``            h → q_lora_rank (when ``q_lora_rank`` is set)
``q_norm``            ``q_a_layernorm``       RMSNorm of q_lora_rank
``wq_b``              ``q_b_proj``            q_lora_rank → heads·(nope + rope)
``wq``                ``q_proj``              h → heads·(nope + rope) (when ``q_lora_rank`` is null)
``wkv_a``             ``kv_a_proj_with_mqa``  h → kv_lora_rank + rope: the latent, then one rotary key
``kv_norm``           ``kv_a_layernorm``      RMSNorm of kv_lora_rank
``wkv_b``             ``kv_b_proj``           kv_lora_rank → heads·(nope + v): per head k_nope, then v
``wo``                ``o_proj``              heads·v → h
====================  ======================  ==========================================================

Each head's query is [q_nope, RoPE(q_rope)], its key [k_nope, RoPE(k_rope)] with the one rotary key shared by all
heads; the softmax scale is 1/sqrt(nope + rope). No linear has a bias (DeepSeek-V3's ``attention_bias`` false; the
planner's ``workload.moe.mla_linears`` price none). Differences, none of which changes what is computed:

* RoPE rotates adjacent pairs (the zoo's ``apply_rope``, Meta's layout) and keeps them in place, where transformers
  with ``rope_interleave`` (DeepSeek-V3's default) rotates the same pairs and then de-interleaves the rope dims. The
  same permutation of q's and k's rope dims leaves every q·k, so the attention, unchanged.
* No rope scaling: the zoo's RoPE has no YaRN, so transformers' ``mscale`` factor on the softmax scale (which
  applies only with ``rope_scaling``) is 1. A model trained with YaRN (DeepSeek-V3's 128K context) is built as its
  un-scaled 4K base: the tiny models here use no rope scaling.
* The latent norms' epsilon is the zoo's ``NORM_EPS`` (ModelSpec has no epsilon field; DeepSeek-V3 uses 1e-6).
* When v_head_dim < nope + rope, v is zero-padded to the query/key width for the attention kernel and its output
  sliced back (transformers does the same for flash-attention-2): SDPA's fused kernels (CPU flash, CUDA flash) take
  one head dimension only, the math fallback would keep the s×s probabilities. A wider v than q/k is refused by
  ``check_buildable``.

Tensor parallelism (``runtime.parallelize``, rules from ``planner.specs.layout.tp_plan``), as Megatron-core's
``MLASelfAttention`` (megatron/core/transformer/multi_latent_attention.py, NVIDIA/Megatron-LM commit
003b4ce2615f4e501ecbc39e01e0f76d237a35d9) and the planner's ``mla_linears`` split it: the down projections ``wq_a``,
``wkv_a`` and their norms are replicated on the TP ranks (plain tensors, like the non-SP norms), ``wq_b`` / ``wq`` and
``wkv_b`` column-parallel (by heads) and ``wo`` row-parallel. With sequence parallelism the block's input is gathered
before the attention (the ``layers.*.attn`` prepare-input rule), as for the other column-parallel linears; Megatron
instead runs the down projections on the local tokens and gathers the latents. The column-parallel linears' input
gradients are all-reduced by ``ColwiseParallel``; the one rotary key, used by every head, gets only its local heads'
gradient on a rank, so its gradient is summed over TP here (``tp_mesh``): after both, the replicated weights'
gradients are equal on every TP rank.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from planner.specs import ModelSpec
from runtime.models.transformer import NORM_EPS, Attention, RMSNorm, apply_rope


def _tp_summed_grad(x: torch.Tensor, tp_mesh) -> torch.Tensor:
    """``x`` unchanged forward; backward its gradient summed over the TP ranks (a replicated tensor read by each
    rank's own heads: each rank's gradient is its heads' part)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    return DTensor.from_local(x, tp_mesh, [Replicate()], run_check=False).to_local(grad_placements=[Partial()])


class LatentAttention(nn.Module):
    """Causal multi-head latent attention on [B, T, h] (see the module docstring); its parameter-free ``core`` is
    the zoo's ``Attention`` (the target of selective recomputation)."""

    cp = None  # context parallelism: refused for latent attention (runtime.validate, Stack.cp_with_mla)
    tp_mesh = None  # set by runtime.parallelize.apply_attention_tp at tp > 1

    def __init__(self, spec: ModelSpec, *, tp: int = 1) -> None:
        super().__init__()
        mla = spec.mla
        if mla is None:
            raise ValueError("LatentAttention needs a ModelSpec with mla")
        d, heads = spec.hidden_size, spec.num_attention_heads // tp
        self.nope, self.rope, self.v_dim = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
        self.qk_dim, self.kv_rank = mla.qk_head_dim, mla.kv_lora_rank
        self.wq_a: nn.Linear | None = None
        self.q_norm: RMSNorm | None = None
        self.wq_b: nn.Linear | None = None
        self.wq: nn.Linear | None = None
        if mla.q_lora_rank is not None:
            self.wq_a = nn.Linear(d, mla.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(mla.q_lora_rank, eps=NORM_EPS)
            self.wq_b = nn.Linear(mla.q_lora_rank, heads * self.qk_dim, bias=False)
        else:
            self.wq = nn.Linear(d, heads * self.qk_dim, bias=False)
        self.wkv_a = nn.Linear(d, self.kv_rank + self.rope, bias=False)
        self.kv_norm = RMSNorm(self.kv_rank, eps=NORM_EPS)
        self.wkv_b = nn.Linear(self.kv_rank, heads * (self.nope + self.v_dim), bias=False)
        self.wo = nn.Linear(heads * self.v_dim, d, bias=False)
        self.core = Attention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]
        if self.wq is not None:
            q = self.wq(x)
        else:
            assert self.wq_a is not None and self.q_norm is not None and self.wq_b is not None
            q = self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(b, t, -1, self.qk_dim)  # -1: this rank's heads
        heads = q.shape[2]
        q_nope, q_rope = q.split([self.nope, self.rope], dim=-1)
        latent, k_rope = self.wkv_a(x).split([self.kv_rank, self.rope], dim=-1)
        kv = self.wkv_b(self.kv_norm(latent)).view(b, t, heads, self.nope + self.v_dim)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        if self.tp_mesh is not None:
            k_rope = _tp_summed_grad(k_rope, self.tp_mesh)
        q_rope, k_rope = apply_rope(q_rope), apply_rope(k_rope.unsqueeze(2))  # k_rope: one head, shared
        q = torch.cat((q_nope, q_rope), dim=-1)
        k = torch.cat((k_nope, k_rope.expand(b, t, heads, self.rope)), dim=-1)
        pad = self.qk_dim - self.v_dim
        if pad:
            v = F.pad(v, (0, pad))
        out = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # scale 1/sqrt(qk_dim)
        if pad:
            out = out[..., : self.v_dim]
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))
