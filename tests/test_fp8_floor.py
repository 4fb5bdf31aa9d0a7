"""``floors.layer_floor`` under FP8 (issues 24, 26): the FLOPs at ``floors.gemm_ceiling`` (the larger of the 16-bit
and the FP8 GEMM ceilings) are a floor of every GEMM ``gpu.gemm_time`` prices, and so of a dense layer group's
F + B; ``bounds.floor_bound`` ≤ ``lean_bound`` for every class of random FP8 requests on the stacks that train in
FP8 (the frontier keys a CP family by it until it nears the front: a floor above would skip a class that could win).
"""

from __future__ import annotations

import random

import pytest

from planner.compose.context_parallel import cp_view
from planner.compose.cost import Context
from planner.compose.floors import gemm_ceiling, layer_floor
from planner.compose.terms import layer_group
from planner.pricing.gpu import gemm_time
from planner.search import space
from planner.search.bounds import floor_bound, lean_bound
from planner.search.space import enumerate_candidates
from planner.specs import ParallelPins, SearchOptions, TrainingSpec
from planner.specs.catalog import get_gpu, get_model
from planner.specs.errors import MeshplanError
from planner.specs.fp8 import check_fp8
from planner.specs.stacks import STACKS
from tests.plan_support import random_context

FP8_GPUS = ["h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-192gb"]


def fp8_instance(seed: int) -> Context:
    """A catalog dense model at a long sequence, in FP8 on a stack that trains in it, with a recipe it and the GPU
    run."""
    rng = random.Random(3000 + seed)
    while True:
        model = get_model(
            rng.choice(["llama3.1-8b", "llama3-70b", "qwen2.5-7b", "gpt3-13b", "llama2-13b", "tiny-llama"])
        )
        gpu = rng.choice(FP8_GPUS)
        stack = rng.choice(["megatron", "torchtitan", "nemo-2407"])
        recipe = rng.choice(STACKS[stack].fp8_recipes)
        training = TrainingSpec(
            global_batch_size=rng.choice([4, 8, 16, 24]),
            seq_len=rng.choice([8192, 16384, 32768, 65536, 131072]),
            precision="fp8",
            fp8_recipe=recipe,
            stack=stack,
        )
        try:
            check_fp8(training, get_gpu(gpu), STACKS[stack], {gpu: get_gpu(gpu)})
        except MeshplanError:
            continue
        return random_context(rng, model, gpu, training)


@pytest.mark.parametrize("seed", range(4))
def test_no_gemm_is_priced_above_the_ceiling(seed: int) -> None:
    """Every GEMM ``gpu.gemm_time`` prices (16-bit or FP8, forward or backward, any shape: wave-quantised, small,
    memory-bound) takes at least its FLOPs at ``gemm_ceiling``."""
    ctx = fp8_instance(seed)
    rate = gemm_ceiling(ctx)
    rng = random.Random(seed)
    for _ in range(500):
        m, n, k = (rng.choice([1, 7, 64, 128, 1000, 4096, 8192, 28672, 131072]) for _ in range(3))
        count, fp8, bwd = rng.choice([1, 3]), rng.random() < 0.5, rng.random() < 0.5
        t = gemm_time(ctx, m, n, k, count, fp8=fp8, backward=bwd)
        assert 2.0 * m * n * k * count / rate <= t * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_the_fp8_floor_is_below_the_priced_layers_and_the_lean_bound(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table of random classes of FP8 requests: ``layer_floor`` ≤ the layer group's block and LM-head F + B (TP
    overlap off and on), ``floor_bound`` ≤ ``lean_bound``. CP at every length (``CP_MIN_SEQ`` 0)."""
    monkeypatch.setattr(space, "CP_MIN_SEQ", 0)
    ctx = fp8_instance(seed)
    cands = enumerate_candidates(ctx, ParallelPins(), SearchOptions())
    rng = random.Random(seed)
    checked = 0
    for c in rng.sample(cands, min(300, len(cands))):
        fl = layer_floor(ctx, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, c.cp)
        assert fl is not None  # dense, analytic, on a GPU: the floor applies under FP8 too
        view = cp_view(ctx, c.cp)
        for tpo in {False, c.tp_comm_overlap}:
            lg = layer_group(view, c.micro_batch_size, c.tp, c.sequence_parallel, c.recompute, tpo)
            assert 0 < fl[0] <= lg.fwd.layer + lg.bwd.layer
            assert fl[1] <= lg.fwd.head + lg.bwd.head
        floor = floor_bound(ctx, c)
        if c.tp_comm_overlap:
            assert floor is None
            continue
        assert floor is not None and 0 < floor <= lean_bound(ctx, c)
        checked += 1
    assert checked > 0
