"""torchtitan's compiled ring attention waits for each collective where it issues it (cost model 57): traced, torch's
functional collectives return ``wait_tensor(result)`` at once (``_functional_collectives._maybe_wrap_tensor``) and
Inductor leaves the wait there (``reorder_for_compute_comm_overlap`` False), so the all-gather of cat(K, V) and every
fp32 dK/dV send run exposed; eager, the ``AsyncCollectiveTensor`` waits at first use and they run beside the blocks.
Checked against a hand count of the collectives one Llama 3.1 8B block issues at cp = 8 on one H100 node."""

from __future__ import annotations

import pytest

from planner.compose.context_parallel import cp_exposed, ring_pass_seconds, waits_at_issue
from planner.compose.cost import Candidate, Context
from planner.specs import ClusterSpec, TrainingSpec
from planner.specs.catalog import get_gpu, get_model

CP, LOCAL = 8, 32768
KVR = 2 * LOCAL * 32 * 128 * 2  # one rank's K and V repeated to the 32 query heads (torchtitan's repeat_kv), bf16


def ctx_of(kernels: str, stack: str = "torchtitan") -> Context:
    return Context(
        model=get_model("llama3.1-8b"),
        gpu=get_gpu("h100-sxm5-80gb"),
        cluster=ClusterSpec(gpu="h100-sxm5-80gb", num_nodes=1, gpus_per_node=8),
        training=TrainingSpec(global_batch_size=1, seq_len=CP * LOCAL, stack={"base": stack, "kernels": kernels}),
    )


def cand(recompute: str = "full") -> Candidate:
    return Candidate(1, 1, 1, 1, "1f1b", 1, recompute, False, 3, cp=CP, cp_comm="all_gather")


@pytest.mark.parametrize("recompute", ["full", "none"])
def test_compiled_ring_exposes_every_collective(recompute):
    ctx = ctx_of("compiled")
    assert waits_at_issue(ctx)
    c = cand(recompute)
    gather = ctx.comm.time("all_gather", CP * KVR, CP, "intra_node", CP)  # one all-gather of every rank's cat(K, V)
    send = ctx.comm.time("send_recv", 2 * KVR, 2, "intra_node")  # fp32 dK, dV to the next rank
    pf, pb = ring_pass_seconds(ctx, c)
    f, b = cp_exposed(ctx, c)
    # forward: the gather, then the merge passes; backward: the gather again, a dK/dV send after each of the cp blocks
    assert f == pytest.approx(gather + pf, rel=1e-9)
    rerun = f if recompute == "full" else 0.0  # full recomputation reruns the forward ring in backward
    assert b == pytest.approx(gather + CP * send + pb + rerun, rel=1e-9)


def test_eager_ring_overlaps_and_other_stacks_unchanged():
    c = cand()
    eager, compiled = ctx_of("eager"), ctx_of("compiled")
    assert not waits_at_issue(eager) and not waits_at_issue(ctx_of("compiled", "megatron"))
    fe, be = cp_exposed(eager, c)
    fc, bc = cp_exposed(compiled, c)
    pe, pc = ring_pass_seconds(eager, c), ring_pass_seconds(compiled, c)
    # beside the blocks the eager exchange exposes less than the whole collectives the compiled one waits for
    assert fe - pe[0] < fc - pc[0] and be - pe[1] - fe < bc - pc[1] - fc
