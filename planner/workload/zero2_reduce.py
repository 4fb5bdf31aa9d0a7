"""ZeRO-2's gradient reduction as DeepSpeed v0.5.0 issues it (``Stack.zero2_reduce = "owner"``, the ``deepspeed-2021``
preset): one ``dist.reduce`` per owner rank's slice of each gradient bucket, not one reduce-scatter.

Read at microsoft/DeepSpeed v0.5.0 (f28432441b), deepspeed/runtime/zero/stage2.py (``stage2``):

* each parameter group is flattened in its order, padded to a multiple of the dp ranks and split into dp equal
  partitions, partition r owned by rank r (``flatten_dense_tensors_aligned(..., dp)``, stage2:283-287;
  ``partition_size = len(flat) / dp``, stage2:320-328; round-robin reordering off by default, stage2:270-278);
* gradients join a bucket in the order the backward produces them; one that would overflow ``reduce_bucket_size``
  (5e8 elements, zero/constants.py:68) reduces the bucket first (``reduce_independent_p_g_buckets_and_remove_grads``,
  stage2:781-790); after the backward the last bucket is reduced;
* a bucket's reduction (``average_tensor``, stage2:853-939, with ``reduce_scatter`` on by default, constants.py:57)
  walks its gradients in bucket order, each gradient's slices by owner in offset order, merging a slice into the one
  before when both go to the same owner (stage2:886-919), and issues ONE ``dist.reduce`` of each merged slice to its
  owner (stage2:924-936) — as many reduces as owner runs, each NCCL's ring reduce (``pricing.nccl``: nRanks steps,
  its bus bytes the whole slice, not (n − 1)/n of it); with ``overlap_comm`` off at stage 2 by default
  (constants.py:60, zero/config.py:104-109) on the compute stream, which waits for each (``handle.wait()``,
  stage2:938-939).

The parameter groups are Megatron's, which Megatron-DeepSpeed's GPT passes to DeepSpeed: weights with weight decay,
LayerNorms and biases without (``_get_params_for_weight_decay_optimization``, Megatron-LM v2.0
megatron/optimizer/__init__.py:25-47), each in ``module.modules()`` order: the embeddings, each block's
input_layernorm, query_key_value, dense, post_attention_layernorm, dense_h_to_4h, dense_4h_to_h, the final
LayerNorm. The backward produces gradients in the reverse of that order (the tied word embedding's last).
"""

from __future__ import annotations

import math
from functools import lru_cache

from planner.specs import ModelSpec
from planner.workload.ops import linears, other_params

DECAY, NO_DECAY = 0, 1


def module_params(model: ModelSpec, tp: int) -> tuple[tuple[int, int], ...]:
    """A rank's parameters in module order as (group, elements): a GPT of Megatron's model code (module docstring);
    the fused query_key_value's weight and bias one tensor each; an untied output layer after the final norm."""
    out = [(DECAY, n) for n in other_params(model, "embedding", tp)]
    norms = other_params(model, "transformer_block", tp)
    half = len(norms) // 2
    block: list[tuple[int, int]] = []
    for lin in linears(model, "transformer_block", tp):
        if lin.name in ("wk", "wv"):  # one query_key_value: wq's entries take wk's and wv's
            (_, w), (_, b) = block[-2], block[-1]
            block[-2:] = [(DECAY, w + lin.n * lin.k), (NO_DECAY, b + lin.bias)]
            continue
        before = norms[:half] if lin.name == "wq" else norms[half:] if lin.name == "w1" else ()
        block += [(NO_DECAY, x) for x in before] + [(DECAY, lin.n * lin.k), (NO_DECAY, lin.bias)]
    out += [p for p in block if p[1]] * model.num_layers
    out += [(NO_DECAY, x) for x in other_params(model, "lm_head", tp)]
    if not model.tie_embeddings:
        out += [(DECAY, lin.n * lin.k) for lin in linears(model, "lm_head", tp)]
    return tuple(out)


@lru_cache(maxsize=256)
def owner_reduces(params: tuple[tuple[int, int], ...], dp: int, bucket: int) -> tuple[int, ...]:
    """Elements of each ``dist.reduce`` one micro-batch's backward issues, in order (module docstring): ``params`` in
    module order (``module_params``), ``dp`` ranks, ``bucket`` elements a bucket."""
    totals = [0, 0]
    offsets = []
    for g, n in params:
        offsets.append(totals[g])
        totals[g] += n
    part = [math.ceil(x / dp) for x in totals]  # each group padded to a multiple of dp, dp equal partitions
    out: list[int] = []
    runs: list[list[int]] = []  # the bucket's merged (owner, elements)
    filled = 0
    for (g, n), o in zip(reversed(params), reversed(offsets)):
        if filled + n > bucket:  # the bucket is reduced before this gradient joins it
            out += [r[1] for r in runs]
            runs, filled = [], 0
        s = part[g]
        for owner in range(o // s, (o + n - 1) // s + 1):
            piece = min(o + n, (owner + 1) * s) - max(o, owner * s)
            if runs and runs[-1][0] == owner:
                runs[-1][1] += piece
            else:
                runs.append([owner, piece])
        filled += n
    return tuple(out + [r[1] for r in runs])
