"""Overlapped tensor parallelism as data (issue 24): which of a block's sequence-parallel collectives a stack
pipelines with which GEMM, and how (``parallel.tp_comm_overlap``; ``Stack.tp_overlap``). What it costs on a device
is ``planner.pricing.tp_overlap``; the collectives themselves are ``planner.workload.collectives.tp_comms``'s.

A block under Megatron-style sequence parallelism issues, per micro-batch, an all-gather of the residual stream
before each column-parallel GEMM group (QKV, FC1) and a reduce-scatter after each row-parallel GEMM (proj, FC2)
in forward, and in backward an all-gather of the row-parallel outputs' gradients before their data-gradient GEMMs
and a reduce-scatter of the column-parallel input gradients (``tp_comms``: 4 + 4, the ``"megatron"`` pattern).

* ``"userbuffers"`` — Transformer Engine's userbuffers under Megatron's ``--tp-comm-overlap`` (NVIDIA/TransformerEngine
  ``transformer_engine/pytorch/module/base.py`` ``initialize_ub`` at 0004dbd0, the default methods): ``ring_exchange``
  for ``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad`` (the all-gather split into tp point-to-point
  steps, each shard's GEMM chunk run as it arrives, the local shard first: one GEMM of tokens/tp rows per step,
  ``comm_gemm_overlap.h`` ``split_overlap_ag``, TE 09ba842 :865-883); ``pipeline`` for ``proj_fprop``,
  ``fc2_fprop`` (the GEMM split into ``num_splits = 4`` chunks of its output columns — ``split_overlap_rs``
  :327-331, ``m_chunk = m / _num_splits`` of the weight's rows, the output ``{n, m_chunk}`` reduce-scattered
  strided — each chunk's reduce-scatter run under the next chunk's GEMM); ``bulk`` for ``qkv_dgrad``/``qkv_wgrad``, ``fc1_dgrad``/``fc1_wgrad`` (the input gradient's
  reduce-scatter run whole beside the weight-gradient GEMM, which does not depend on it). All 8 overlap; the
  embedding's and the LM head's collectives (Megatron-core's own ``VocabParallelEmbedding`` and output
  ``ColumnParallelLinear``, not TE modules) stay blocking.
* ``"async_tp"`` — torchtitan's async TP (``compile.enable_async_tensor_parallel``, torchtitan 0.3.0
  ``torchtitan/distributed/compile.py`` ``_maybe_enable_async_tp``: ``torch._inductor.config._micro_pipeline_tp``
  on the compiled ``TransformerBlock``s): Inductor's ``micro_pipeline_tp_pass`` (torch 2.13
  ``torch/_inductor/fx_passes/micro_pipeline_tp.py``) rewrites all-gather → mm into ``fused_all_gather_matmul``
  and mm → reduce-scatter into ``fused_matmul_reduce_scatter``, each decomposed into tp chunks over symmetric
  memory. Forward: all 4 (one all-gather feeds wq, wk, wv; one w1 (+ w3)). Backward: the all-gathered output
  gradients feed the wo / w2 data-gradient mms (2 overlap); the column-parallel input gradient is a sum of mms
  (wq + wk + wv, w1 + w3) before its reduce-scatter, which the matmul → reduce-scatter pattern does not match:
  those 2 stay blocking. Only the compiled blocks: the embedding and the LM head stay blocking. Under an FP8
  recipe whose SP all-gathers move 16-bit data (``fp8_cast_after_gather``: torchao rowwise, whose plain
  ``ColwiseParallel`` gathers the norm output and the output gradient in bf16 and casts after the gather) no
  all-gather pair fuses: ``_find_consumer_matmuls`` takes only an ``aten.mm`` / ``aten._scaled_mm`` (or reshape →
  mm → reshape) that reads the gathered tensor itself, and here the gathered tensor's users are the cast's
  amax and scaling ops (torch ``_inductor/fx_passes/micro_pipeline_tp.py``, the same before and after pytorch PR
  149247 of 2025-03; pytorch/pytorch issue 149990, "all-gather-matmuls not fusing properly when rowwise scales are
  used": the matmul → reduce-scatters fuse, the all-gather → matmuls do not). The 2 forward reduce-scatter pairs
  (``_scaled_mm`` → reshape → reduce-scatter, ``fused_scaled_matmul_reduce_scatter``) stay; the 4 all-gathers
  run blocking. Tensorwise casts before its FP8 all-gather (``Float8ColwiseParallel``): its pairs all fuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.specs import ModelSpec
from planner.workload.ops import Linear, dense_block_linears

Method = Literal["ring", "pipeline", "bulk"]
#: How a pair's GEMM is cut into its chunks: by the token rows (one TP shard each) or by the output columns.
Split = Literal["rows", "cols"]
Phase = Literal["fwd", "dgrad", "wgrad"]

#: Transformer Engine's pipeline method's default GEMM splits (``initialize_ub`` ``add_ub(num_splits=4)``).
UB_PIPELINE_SPLITS = 4


@dataclass(frozen=True, slots=True)
class OverlapPair:
    """One SP collective (``op`` of the residual stream) pipelined with the GEMMs of ``gemms`` (linear names,
    the ``phase`` GEMM of each) in forward or backward (``bwd``), by ``method`` in ``chunks`` pieces (ring and
    pipeline; bulk runs whole), each chunk one GEMM of 1/chunks of the token rows or of the output columns
    (``split``)."""

    op: Literal["all_gather", "reduce_scatter"]
    gemms: tuple[str, ...]
    phase: Phase
    method: Method
    bwd: bool
    chunks: int
    split: Split = "rows"
    #: the pair's linears run as one GEMM of their summed output columns (TE's fused QKV ``linear_qkv`` and gated
    #: ``linear_fc1`` weights); False: one GEMM each (torchtitan's separate wq/wk/wv, w1/w3 modules)
    fused: bool = False


def overlap_pairs(kind: str, tp: int, fp8_cast_after_gather: bool = False) -> tuple[OverlapPair, ...]:
    """The pairs of a dense block that the stack's overlap ``kind`` (``Stack.tp_overlap``) pipelines at ``tp``;
    ``fp8_cast_after_gather``: an FP8 cast sits between each 16-bit all-gather and its matmul, which async TP's
    pattern does not fuse (module docstring)."""
    qkv, fc1 = ("wq", "wk", "wv"), ("w1", "w3")
    if kind == "userbuffers":
        return (
            OverlapPair("all_gather", qkv, "fwd", "ring", False, tp, fused=True),
            OverlapPair("reduce_scatter", ("wo",), "fwd", "pipeline", False, UB_PIPELINE_SPLITS, "cols"),
            OverlapPair("all_gather", fc1, "fwd", "ring", False, tp, fused=True),
            OverlapPair("reduce_scatter", ("w2",), "fwd", "pipeline", False, UB_PIPELINE_SPLITS, "cols"),
            OverlapPair("all_gather", ("wo",), "dgrad", "ring", True, tp),
            OverlapPair("all_gather", ("w2",), "dgrad", "ring", True, tp),
            OverlapPair("reduce_scatter", qkv, "wgrad", "bulk", True, 1),
            OverlapPair("reduce_scatter", fc1, "wgrad", "bulk", True, 1),
        )
    if kind == "async_tp":
        pairs = (
            OverlapPair("all_gather", qkv, "fwd", "ring", False, tp),
            OverlapPair("reduce_scatter", ("wo",), "fwd", "pipeline", False, tp),
            OverlapPair("all_gather", fc1, "fwd", "ring", False, tp),
            OverlapPair("reduce_scatter", ("w2",), "fwd", "pipeline", False, tp),
            OverlapPair("all_gather", ("wo",), "dgrad", "ring", True, tp),
            OverlapPair("all_gather", ("w2",), "dgrad", "ring", True, tp),
        )
        return tuple(p for p in pairs if p.op != "all_gather") if fp8_cast_after_gather else pairs
    raise ValueError(f"no TP overlap {kind!r}")


def pair_linears(model: ModelSpec, pair: OverlapPair, tp: int) -> tuple[Linear, ...]:
    """The block's linears (on one TP rank) whose GEMMs a pair overlaps (w3 only where the MLP has it)."""
    return tuple(lin for lin in dense_block_linears(model, tp) if lin.name in pair.gemms)
