"""Memory per pipeline rank, per GPU, itemised for ``Estimate.memory_per_stage``.

The totals are exactly ``cost.rank_memory`` (what the search constrains):
* weights, gradients, optimizer states: parameters on the rank × bytes per parameter under the ZeRO
  stage (Rajbhandari et al. 2020; 16-bit weights and gradients, K = 12 bytes of fp32 master weights
  and Adam moments, K = 8 in fp32 training; ZeRO-1 shards K, ZeRO-2 also the gradients, ZeRO-3
  everything, by dp);
* activations: saved bytes per layer (from the profile or ``planner.analytic``) × copies alive at
  the schedule's peak (1F1B: rank i holds min(pp − i, m); GPipe: m; interleaved: counted from the
  Megatron order), plus the embedding's and the LM head's;
* buffers: fp32 logits for the loss on the last rank, p2p send/recv buffers, one layer's
  rematerialised activations under recomputation, two gathered layers under ZeRO-3;
* reserve: 1 GiB (CUDA context, NCCL and cuBLAS workspaces) + 5 % of the above (allocator
  fragmentation).
"""

from __future__ import annotations

from planner.cost import GIB, ClassCosts, rank_memory, reserve_bytes
from planner.specs import StageMemory


def stage_memory(cc: ClassCosts, n: list[int], r: int) -> StageMemory:
    own = cc.rank_chunks(r)
    states = sum(n[c] * cc.state_layer + cc.state_extra[c] for c in own)
    acts = max(sum(k * (n[c] * cc.act_layer + cc.act_extra[c]) for c, k in vec.items()) for vec in cc.live[r])
    total = rank_memory(cc, n, r)
    # Split the model states in the ratio of their per-parameter bytes.
    w, g, k = _state_split(cc)
    s = w + g + k
    reserve = reserve_bytes(total)
    return StageMemory(
        weights_gib=states * w / s / GIB if s else 0.0,
        gradients_gib=states * g / s / GIB if s else 0.0,
        optimizer_gib=states * k / s / GIB if s else 0.0,
        activations_gib=acts / GIB,
        buffers_gib=cc.buffer_const[r] / GIB,
        reserve_gib=reserve / GIB,
        total_gib=(total + reserve) / GIB,
    )


def _state_split(cc: ClassCosts) -> tuple[float, float, float]:
    from planner.cost import OPTIMIZER_STATE_BYTES

    c = cc.cand
    e = cc.elt
    k = OPTIMIZER_STATE_BYTES[(cc.optimizer, e < 4)]
    d = c.dp
    return {0: (e, e, k), 1: (e, e, k / d), 2: (e, e / d, k / d), 3: (e / d, e / d, k / d)}[c.zero_stage]


def total_gib(cc: ClassCosts, n: list[int], r: int) -> float:
    t = rank_memory(cc, n, r)
    return (t + reserve_bytes(t)) / GIB
