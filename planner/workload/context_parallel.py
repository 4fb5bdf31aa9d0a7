"""The collectives context parallelism (CP, ``parallel.cp`` / ``parallel.cp_comm``) issues, as data: per block and
micro-batch, forward and backward, each a ``Collective`` on the ``cp`` axis (priced by
``planner.pricing.context_parallel``; what hides under the attention is ``planner.compose.context_parallel``).

A rank holds s/cp tokens of each of the b sequences of a micro-batch (load-balanced causal chunks i and
2·cp − 1 − i); its local K and V are ``kv_bytes`` = 2·b·(s/cp)·(kv_heads/tp)·head_dim·β. Per exchange
(../shared/notes/moe-cp-fp8.md §6):

* ``p2p`` (ring; Ring Attention arXiv 2310.01889; Megatron/TE ``AttnFuncWithCPAndKVP2P``): cp − 1 send/recv
  steps of the KV block in forward, each launched before the step's attention block (TE
  ``flash_attn_p2p_communicate``) so it runs beside it; in backward cp − 1 steps that move the KV block and
  the partial dK/dV (2× the bytes).
* ``all_gather`` (Llama 3 §3.3.2; TE ``AttnFuncWithCPAndKVAllGather``): K and V all-gathered (two calls,
  ``gather_along_first_dim``) before attention; backward gathers them again (only the local K/V are saved:
  ``_attn_cp_kv_allgather_bwd_gather``) and reduce-scatters dK and dV. Blocking: attention waits for them.
* ``a2a`` (Ulysses, arXiv 2309.14509; TE ``AttnFuncWithCPAndQKVOA2A``): Q, K, V from sequence- to head-sharded
  (3 all-to-alls) and the output back (1), each of the local tensor; backward the same four on the gradients.
  Blocking.
* ``a2a+p2p`` (Megatron ``hierarchical_context_parallel_sizes``): an a2a over the ``inner`` CP ranks of a node
  (heads ÷ inner, tokens × inner), then a ring over the cp / inner nodes with KV blocks of the same bytes.
* ``all_gather`` as torch's experimental ``context_parallel`` runs it (``torch_ring``: torchtitan's stacks; torch
  ``distributed/tensor/experimental/_attention.py`` of late 2024, torch 1963fc8 of torchtitan's 2024-12 tables:
  ``_templated_ring_attention``, ``_AllGatherRotater``, ``_templated_ring_attention_backward``, ``_SDPAMerger``):
  torchtitan repeats K and V to the query heads before SDPA (``repeat_kv``, torchtitan models/llama/model.py at
  9dec370), so the exchange moves ``kv_bytes`` at heads/tp. Forward: ONE all-gather of cat(K, V), issued before the
  first (local, causal) SDPA call and waited before the second, so it runs beside the first of the cp blocks.
  Backward: the same all-gather beside the first block, and dK/dV accumulated in fp32 (``convert_to_f32``) and
  passed along a ring (``dkv_rotater``: ``_AllToAllRotater``, ``permute_tensor`` to the next rank) after every block:
  the i-th send runs beside block i + 1, the last is waited after the loop (exposed). No reduce-scatter.
  ``torch_ring_passes``: the memory-bound passes of the per-block merge and accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs import ModelSpec
from planner.workload.collectives import Collective, Comms


def kv_bytes(model: ModelSpec, mbs: int, local_seq: int, tp: int, elt: int, repeated: bool = False) -> float:
    """One rank's K and V of a block: 2·b·(s/cp)·(kv_heads/tp)·head_dim·β (KV heads replicated when tp > kv_heads);
    latent attention's per-head K and V at their own widths, b·(s/cp)·(heads/tp)·(qk + v head dims)·β.
    ``repeated``: K and V copied to the query heads before attention (torchtitan's ``repeat_kv``), heads/tp."""
    kv_local = max(1, (model.num_attention_heads if repeated else model.num_kv_heads) // tp)
    if model.mla is not None:
        return float(mbs * local_seq * kv_local * (model.mla.qk_head_dim + model.mla.v_head_dim) * elt)
    return 2.0 * mbs * local_seq * kv_local * model.head_dim * elt


def q_bytes(model: ModelSpec, mbs: int, local_seq: int, tp: int, elt: int) -> float:
    """One rank's queries (or attention output) of a block: b·(s/cp)·(heads/tp)·head_dim·β (latent attention: the
    query/key head width)."""
    d = model.mla.qk_head_dim if model.mla is not None else model.head_dim
    return float(mbs * local_seq * (model.num_attention_heads // tp) * d * elt)


#: Bytes of an fp32 element: torch's ring keeps the merged output and the dQ/dK/dV accumulators in fp32
#: (``_ContextParallelOptions.convert_to_f32 = True``).
FP32 = 4


def torch_ring_passes(q_elems: float, cp: int, elt: int, fused: bool) -> tuple[float, float]:
    """(forward, backward) bytes of the memory-bound passes torch's ring attention adds to one block on the busiest
    CP rank (the last one: each block after the first takes half of the received K/V and all its queries, a full
    merge), with n = ``q_elems`` (one rank's queries, the size of its repeated K or V), β = ``elt``, fp32 = 4
    (torch ``distributed/tensor/experimental/_attention.py`` of late 2024):

    * forward: K and V made contiguous (``key.contiguous()``: read + write 2n·β); cat(K, V) before every send but the
      last (cp − 1 × 4n·β); each block's output cast to fp32 (``_SDPAMerger.step``: n·β + 4n) and merged into the
      running output (``_merge_one``: ``out − sigmoid(lse_b − lse)·(out − out_b)``, eager three passes over fp32 n:
      32n); a compiled block (Inductor fuses a chain of pointwise ops into one kernel) casts and merges in one pass
      (read 4n + n·β, write 4n); the result cast back (4n + n·β). Compiled, only the first cat(K, V) runs: the
      all-gather rotater reads its argument once (``_AllGatherRotater.exchange_buffers``: ``if
      self._aggregated_buffer is None``), so the later cats have no user in the traced graph and Inductor drops them
      (``torch/_inductor/scheduler.py`` ``dead_node_elimination``); the same in backward for the K/V cat;
    * backward (``_templated_ring_attention_backward``): three zero-filled fp32 accumulators (12n); K and V made
      contiguous (4n·β) and concatenated before every send but the last (cp − 1 × 4n·β); per block dQ, dK, dV added
      into fp32 (each read 4n + n·β, write 4n); after the first block dK and dV go into their first half and are
      re-concatenated (``_partial_update``: 2 × 8n); cat(dK, dV) in fp32 for the send (16n); dQ and the last
      received dK/dV cast back (4n + n·β, 8n + 2n·β)."""
    n, b, f = q_elems, elt, FP32
    merge = (f * n + n * b + f * n) if fused else (n * b + f * n + 8 * f * n)
    cats = min(1, cp - 1) if fused else cp - 1  # cat(K, V) for the rotater: compiled, the unread ones are dropped
    fwd = 4 * n * b + cats * 4 * n * b + (n * b + f * n) + (cp - 1) * merge + (f * n + n * b)
    add = 2 * f * n + n * b
    bwd = 3 * f * n + 4 * n * b + cats * 4 * n * b + cp * (3 * add + 4 * f * n) + (cp - 1) * 2 * 2 * f * n
    bwd += (f * n + n * b) + (2 * f * n + 2 * n * b)
    return fwd, bwd


def torch_ring_buffer_bytes(model: ModelSpec, mbs: int, local_seq: int, tp: int, cp: int, elt: int) -> int:
    """Bytes torch's ring attention (``torch_ring``, all-gather rotation) holds inside one attention backward beyond
    the tensors autograd saved, at its peak (a block after the first), with n = ``q_bytes`` elements (one rank's
    queries, the size of its repeated K or V), β = ``elt``, fp32 = 4 (torch ``distributed/tensor/experimental/
    _attention.py``, ``_templated_ring_attention_backward``; read at pytorch 0123248a, the copy at hand: torch
    1963fc8 of the 2024-12 tables is not mirrored, its functions named as in ``torch_ring_passes``' reading):

    * the all-gathered cat(K, V) of every CP rank (``_AllGatherRotater``: ``_aggregated_buffer``, kept for the whole
      loop, each block reading its chunk): cp · 2n·β — ``kv_bytes(repeated=True)`` × cp (torchtitan 9dec370's
      ``--experimental.context_parallel_rotate_method`` defaults to ``allgather``, config_manager.py:364-377);
    * ``key.contiguous()``, ``value.contiguous()`` (the saved K and V are transposed views): 2n·β;
    * the fp32 accumulators (``convert_to_f32``): dQ (``zeros_like(query, dtype=float32)``), dK and dV as received
      from the previous rank or re-concatenated by ``_partial_update``, ``torch.cat`` of dK and dV for the send and
      the ``permute_tensor`` (all-to-all) buffer it lands in on the next rank: 4n + 8n + 8n + 8n;
    * the block's dQ, dK, dV from the flash backward in β (``grad_query_``…, alive until the next block's): 3n·β.

    The forward (recomputed under full recomputation) holds less: the same gathered buffer and contiguous copies,
    the fp32 merged output and one block's fp32 output and merge temporaries. Zero when cp = 1."""
    if cp == 1:
        return 0
    n = q_bytes(model, mbs, local_seq, tp, 1)
    return int(cp * kv_bytes(model, mbs, local_seq, tp, elt, repeated=True) + 5 * n * elt + 28 * n)


@dataclass(frozen=True, slots=True)
class CpComms:
    """A block's CP collectives per micro-batch. ``ring`` are the ring's send/recv steps (overlapped with the
    attention blocks, one step per block but the last); ``blocking`` the all-gathers / all-to-alls /
    reduce-scatters the attention waits for. ``ring_size``: the ranks of the ring (its blocks per pass)."""

    fwd_ring: Comms
    bwd_ring: Comms
    fwd_blocking: Comms
    bwd_blocking: Comms
    ring_size: int


NONE = CpComms((), (), (), (), 1)


def cp_block_comms(
    model: ModelSpec,
    cp: int,
    cp_comm: str,
    mbs: int,
    local_seq: int,
    tp: int,
    elt: int,
    inner: int = 1,
    torch_ring: bool = False,
) -> CpComms:
    """The CP collectives of one block per micro-batch (module docstring). ``local_seq`` = s / cp; ``inner``:
    the a2a group of ``a2a+p2p`` (the CP ranks on one node; 1 or cp makes it a plain ring or a plain a2a);
    ``torch_ring``: torch's experimental ``context_parallel`` (torchtitan): its all-gather and fp32 dK/dV ring."""
    if cp == 1:
        return NONE
    if cp_comm == "all_gather" and torch_ring:
        kvr = kv_bytes(model, mbs, local_seq, tp, elt, repeated=True)
        gather = Collective("cp", "all_gather", cp * kvr, 1)  # one call of cat(K, V) (``_AllGatherRotater``)
        dkv = Collective("cp", "send_recv", kvr * FP32 / elt, 1)  # dK, dV in fp32 to the next rank
        bwd_ring = (gather, Collective("cp", "send_recv", kvr * FP32 / elt, cp - 1))  # each beside one block
        return CpComms((gather,), bwd_ring, (), (dkv,), cp)
    kv = kv_bytes(model, mbs, local_seq, tp, elt)
    q = q_bytes(model, mbs, local_seq, tp, elt)
    if cp_comm == "all_gather":  # K and V each gathered whole (cp·kv/2 bytes per call); again in backward
        gather = Collective("cp", "all_gather", cp * kv / 2, 2)
        return CpComms((), (), (gather,), (gather, Collective("cp", "reduce_scatter", cp * kv / 2, 2)), 1)
    if cp_comm == "a2a" or (cp_comm == "a2a+p2p" and inner >= cp):
        a2a = (Collective("cp", "all_to_all", q, 2), Collective("cp", "all_to_all", kv / 2, 2))  # q, out; k, v
        return CpComms((), (), a2a, a2a, 1)
    ring = cp if cp_comm == "p2p" else cp // max(1, inner)
    blocking: Comms = ()
    if cp_comm == "a2a+p2p" and inner > 1:
        blocking = (Collective("cp", "all_to_all", q, 2), Collective("cp", "all_to_all", kv / 2, 2))
    steps = ring - 1
    fwd = (Collective("cp", "send_recv", kv, steps),) if steps else ()
    bwd = (Collective("cp", "send_recv", 2 * kv, steps),) if steps else ()  # KV and the partial dK/dV
    return CpComms(fwd, bwd, blocking, blocking, ring)
