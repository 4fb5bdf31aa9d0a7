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
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs import ModelSpec
from planner.workload.collectives import Collective, Comms


def kv_bytes(model: ModelSpec, mbs: int, local_seq: int, tp: int, elt: int) -> float:
    """One rank's K and V of a block: 2·b·(s/cp)·(kv_heads/tp)·head_dim·β (KV heads replicated when tp > kv_heads);
    latent attention's per-head K and V at their own widths, b·(s/cp)·(heads/tp)·(qk + v head dims)·β."""
    kv_local = max(1, model.num_kv_heads // tp)
    if model.mla is not None:
        return float(mbs * local_seq * kv_local * (model.mla.qk_head_dim + model.mla.v_head_dim) * elt)
    return 2.0 * mbs * local_seq * kv_local * model.head_dim * elt


def q_bytes(model: ModelSpec, mbs: int, local_seq: int, tp: int, elt: int) -> float:
    """One rank's queries (or attention output) of a block: b·(s/cp)·(heads/tp)·head_dim·β (latent attention: the
    query/key head width)."""
    d = model.mla.qk_head_dim if model.mla is not None else model.head_dim
    return float(mbs * local_seq * (model.num_attention_heads // tp) * d * elt)


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
    model: ModelSpec, cp: int, cp_comm: str, mbs: int, local_seq: int, tp: int, elt: int, inner: int = 1
) -> CpComms:
    """The CP collectives of one block per micro-batch (module docstring). ``local_seq`` = s / cp; ``inner``:
    the a2a group of ``a2a+p2p`` (the CP ranks on one node; 1 or cp makes it a plain ring or a plain a2a)."""
    if cp == 1:
        return NONE
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
