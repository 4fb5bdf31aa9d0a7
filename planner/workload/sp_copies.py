"""The memory passes around torchtitan's sequence-parallel collectives (issues 24/27): HBM bytes a block moves, per
micro-batch, to turn NCCL's dim-0 concatenation into a sequence-dim one and back (vanilla TP), or around async TP's
fused pairs. Plain data; priced as memory-bound kernels by ``compose.layer_group``. torch read at the versions the
code index holds (2024-2026; the rows' torch 38410cf9 of 2025-06 lies between, and every version read has these
lines); the pytorch repository is too large to fetch whole.

torchtitan's TP plan keeps the residual stream as ``[b, s, h]`` sharded on the sequence, ``Shard(1)``
(``torchtitan/models/llama3/parallelize_llama.py`` at 820504e: ``SequenceParallel()`` norms, ``PrepareModuleInput(
input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None))`` before attention and the MLP, ``wo`` /
``w2`` ``rowwise_parallel(output_layouts=Shard(1))``). DTensor redistributes ``Shard(1) → Replicate`` with
``funcol.all_gather_tensor(local, gather_dim=1)`` and ``Partial → Shard(1)`` with ``funcol.reduce_scatter_tensor(t,
scatter_dim=1)`` (torch ``distributed/tensor/placement_types.py`` ``Shard._to_replicate_tensor`` /
``_reduce_shard_tensor``). The NCCL collectives work on dim 0, so torch's functional collectives
(``distributed/_functional_collectives.py``, ``all_gather_tensor`` / ``reduce_scatter_tensor``):

* all-gather, ``gather_dim != 0``: the gathered ``[tp·b, s/tp, h]`` becomes ``[b, s, h]`` by
  ``torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)`` — later ``_maybe_view_chunk_cat``
  (``torch/_utils.py``), which returns a view only when every dimension before ``gather_dim`` has size 1 (b = 1);
  with b > 1 it is that cat: the whole gathered tensor read and written once;
* reduce-scatter, ``scatter_dim != 0``: ``torch.cat(torch.chunk(self, group_size, dim=scatter_dim))`` before the
  collective — a cat allocates and copies whatever b; with b > 1 the chunks are strided, with b = 1 they are
  contiguous and the copy is still issued. Only b > 1 is counted here (under torch.compile a cat of contiguous
  pieces might be lowered to a view; unverified), so b = 1 adds nothing.

torch.compile (torchtitan compiles each ``TransformerBlock``) keeps them: the producer of a reduce-scatter's input
is an ``mm`` and the consumer of an all-gather's output an ``mm`` (extern kernels), so each copy is its own kernel.
Which run, per block and micro-batch (the collectives of ``workload.collectives.tp_comms``): forward the 2 input
all-gathers and the 2 output reduce-scatters; backward the 2 reduce-scatters of the column-parallel input
gradients and the 2 all-gathers of the row-parallel outputs' gradients; with op-level selective checkpointing the
backward reruns the 2 forward all-gathers (``rerun_sp_gathers``) and with full recomputation the whole forward.
Async TP (``Stack.tp_overlap == "async_tp"``) replaces the pairs of ``workload.tp_overlap.overlap_pairs`` by
``fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter`` (torch ``distributed/_symmetric_memory/__init__.py``):
they move the gather/scatter dim to the front and Inductor restrides the producer so that "no extra copy is
required" (``restride_A_shard_for_fused_all_gather_matmul``, ``restride_A_for_fused_matmul_reduce_scatter``), so no
layout copy; instead their own memory passes: an all-gather pair copies its local shard into the symmetric-memory
buffer and into the gathered output (``_pipelined_multi_all_gather_and_consume``: "copy their local shard to their
local p2p buffer", ``copy_shard(dst=shards[rank], src=shard)``), 2 copies of 1/tp of the tensor; a reduce-scatter pair
writes the tp partial products of every rank's rows (``_pipelined_produce_and_all2all`` into ``stacked_partials``)
and sums them in one kernel (``_fused_matmul_reduce_scatter_impl``: ``reduce_fn(stacked_partials.view(...))``,
``torch.sum(dim=0)``): the whole tensor read, one shard written. The remote shards' copies are the collective
itself (``pricing.tp_overlap``). Dense blocks only (the overlap pairs' scope); the embedding's and
the LM head's single collectives are left out.
"""

from __future__ import annotations

from planner.specs.stacks import Stack
from planner.workload.collectives import rerun_sp_gathers
from planner.workload.tp_overlap import overlap_pairs

#: A block's sequence-parallel collectives per micro-batch without overlap, (forward, backward): (all-gathers,
#: reduce-scatters) each (``tp_comms``' pattern).
FWD = (2, 2)
BWD = (2, 2)


def sp_copy_bytes(
    stack: Stack,
    mbs: int,
    tp: int,
    sp: bool,
    recompute: str,
    act: float,
    gather: float,
    overlap: bool,
    cast_after_gather: bool = False,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The HBM bytes of each memory pass (one kernel each) a dense block runs per micro-batch around its
    sequence-parallel collectives (module docstring), forward and backward: a layout copy reads and writes the whole
    (unsharded) tensor, 2 × ``gather`` bytes for an all-gather's (FP8 all-gathers move 1-byte elements), 2 × ``act``
    for a reduce-scatter's (only with b = ``mbs`` > 1); an async-TP pair's passes as the module docstring counts them.
    None outside torchtitan's plan (``Stack.activations == "titan"``) or without SP or TP. ``cast_after_gather``: the
    all-gathers feed an FP8 cast, not the matmul, and stay unfused under async TP (``overlap_pairs``)."""
    if stack.activations != "titan" or not sp or tp == 1:
        return (), ()
    copies = mbs > 1  # b = 1: the all-gather's cat is a view; the reduce-scatter's left out (module docstring)
    ag = {False: FWD[0] * copies, True: BWD[0] * copies}  # unfused collectives with a layout copy
    rs = {False: FWD[1] * copies, True: BWD[1] * copies}
    fused: dict[bool, tuple[float, ...]] = {False: (), True: ()}
    if overlap and stack.tp_overlap == "async_tp":
        for pair in overlap_pairs("async_tp", tp, cast_after_gather):
            if pair.op == "all_gather":
                ag[pair.bwd] -= copies
                fused[pair.bwd] += (2.0 * gather / tp,) * 2  # the local shard into the p2p buffer and into ag_out
            else:
                rs[pair.bwd] -= copies
                fused[pair.bwd] += (act + act / tp,)  # the tp partials summed: read all, write one shard
    fwd = (2.0 * gather,) * ag[False] + (2.0 * act,) * rs[False] + fused[False]
    bwd = (2.0 * gather,) * ag[True] + (2.0 * act,) * rs[True] + fused[True]
    if recompute == "full":
        bwd += fwd
    elif rerun_sp_gathers(stack, recompute):  # the rerun all-gathers, unfused (their outputs feed weight gradients)
        bwd += (2.0 * gather,) * (FWD[0] * copies)
    return fwd, bwd
