"""The layout copies around torchtitan's sequence-parallel collectives (issues 24/27): HBM bytes a block moves, per
micro-batch, to turn NCCL's dim-0 concatenation into a sequence-dim one and back. Plain data; priced as
memory-bound kernels by ``compose.layer_group``.

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
``fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter`` (torch ``distributed/_symmetric_memory/__init__.py``
``_fused_all_gather_matmul_impl``: "Move the gather_dim to the front and flatten", the shards consumed in place;
Inductor restrides the producer so that "no extra copy is required", ``restride_A_shard_for_fused_all_gather_matmul``):
those pairs copy nothing; the others still do. Dense blocks only (the overlap pairs' scope); the embedding's and
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
    stack: Stack, mbs: int, tp: int, sp: bool, recompute: str, act: float, gather: float, overlap: bool
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The HBM bytes of each layout copy (one kernel each) a dense block runs per micro-batch around its
    sequence-parallel collectives (module docstring), forward and backward: each reads and writes the whole
    (unsharded) tensor, 2 × ``gather`` bytes for an all-gather's (FP8 all-gathers move 1-byte elements), 2 × ``act``
    for a reduce-scatter's. None outside torchtitan's plan (``Stack.activations == "titan"``), without SP or TP, or
    with one sequence a micro-batch (``mbs`` = b)."""
    if stack.activations != "titan" or not sp or tp == 1 or mbs <= 1:
        return (), ()
    ag = {False: FWD[0], True: BWD[0]}
    rs = {False: FWD[1], True: BWD[1]}
    if overlap and stack.tp_overlap == "async_tp":
        for pair in overlap_pairs("async_tp", tp):
            (ag if pair.op == "all_gather" else rs)[pair.bwd] -= 1
    fwd = (2.0 * gather,) * ag[False] + (2.0 * act,) * rs[False]
    bwd = (2.0 * gather,) * ag[True] + (2.0 * act,) * rs[True]
    if recompute == "full":
        bwd += fwd
    elif rerun_sp_gathers(stack, recompute):  # the rerun all-gathers, unfused (their outputs feed weight gradients)
        bwd += (2.0 * gather,) * FWD[0]
    return fwd, bwd
