"""The two DGX-H100 Qwen3-30B-A3B rows of Megatron-Bridge's archive (issue 23): the same mapping (16 GPUs, GBS 512,
MBS 2, PP 2, VP 24, EP 8, FP8 current scaling), 25.09 padded to capacity (v0.1.0rc3 run_script.py:96-102,
moe_token_drop.py:18-22) and 25.11 dropless (v0.2.0 qwen3_llm_pretrain.py:33-47). Checked against hand
arithmetic: the requests as the recipes ran them, and that the pair does the same expert work (so what separates
their measured throughput, 10494 vs 5275 tok/s/GPU, is the dropless path itself, not the GEMMs or the all-to-all
volume)."""

from __future__ import annotations

import math

import pytest

from planner.workload.expert_parallel import expert_capacity, expert_rows, routed_rows
from tests.bench_support import bench_module

bench = bench_module("bench_fidelity")
DATA = bench.load()
RUNS = {r["id"]: r for r in DATA["runs"]}
PADDED = "mbridge_25.09_Qwen3_30B_a3B_16gpu_prec-unstated"
DROPLESS = "mbridge_25.11_Qwen3_30B_a3B_16gpu_FP8-CS"

# (row, capacity factor, padded, precision, FP8 recipe): the recipe's MoE and precision settings.
CASES = [
    (PADDED, 1.0, True, "fp8", "current"),
    (DROPLESS, None, False, "fp8", "current"),
]


@pytest.mark.parametrize("run_id, cf, pad, precision, recipe", CASES)
def test_qwen_rows_are_requested_as_their_recipe_ran_them(run_id, cf, pad, precision, recipe):
    req = bench.request(RUNS[run_id], DATA["gpus"])
    moe = req.model.moe
    assert (moe.capacity_factor, moe.pad_to_capacity) == (cf, pad)
    assert (req.training.precision, req.training.fp8_recipe) == (precision, recipe)
    p = req.parallel
    assert (p.tp, p.pp, p.dp, p.ep, p.virtual_stages, p.micro_batch_size) == (1, 2, 8, 8, 24, 2)
    assert (p.recompute, p.zero_stage) == ("none", 1)
    why = bench.reasons_not_expressible(RUNS[run_id])
    assert why == [] if run_id == PADDED else "EP all-to-all overlap" in why[0]


# Hand arithmetic at the rows' mapping: T = MBS·s = 2·4096 tokens a rank routes, k = 8 of E = 128 experts,
# 16 local experts a rank (EP 8). Dropless, force-balanced: T·k = 65536 rows sent, T·k·ep/E = 4096 into each
# local expert. Padded at capacity factor 1: C = ⌈T·k/E⌉ = 512 rows for each of the 128 experts (512·128 = 65536
# sent), C from each of the 8 EP ranks into a local expert (4096).
HAND = [(PADDED, 512, 65536, 4096), (DROPLESS, None, 65536, 4096)]


@pytest.mark.parametrize("run_id, capacity, sent, per_expert", HAND)
def test_the_pair_does_the_same_expert_work(run_id, capacity, sent, per_expert):
    model = bench.request(RUNS[run_id], DATA["gpus"]).model
    t = 2 * 4096
    if capacity is not None:
        assert expert_capacity(t, model) == capacity == math.ceil(t * 8 / 128)
    assert routed_rows(model, t, t) == (sent, sent)
    assert expert_rows(model, t, t, 8) == per_expert == t * 8 * 8 // 128


def test_the_pair_counts_the_same_model_flops_per_token():
    """The table's own arithmetic: Model TFLOP/s ÷ tokens/s is the same per-token count in both rows (within the
    rounding of three-digit TFLOP/s: 241e12 / 10494 and 121e12 / 5275 differ by 0.1 %)."""
    per_token = [
        RUNS[r]["measured"]["tflops_per_gpu"] * 1e12 / RUNS[r]["measured"]["tokens_per_s_per_gpu"]
        for r in (PADDED, DROPLESS)
    ]
    assert per_token[0] == pytest.approx(per_token[1], rel=0.5 / 121)
