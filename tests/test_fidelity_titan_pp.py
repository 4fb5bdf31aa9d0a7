"""torchtitan's pipelined 405B rows of its 2024-12 H100 benchmark (Tables 5 and 6) as torchtitan 9dec370 ran them.

The rows carry the benchmark's local batch (``training.batch_size`` per DP rank) as ``batch.micro``;
``bench_fidelity.titan_pp_row`` splits it as pytorch/torchtitan 9dec370 does. Expected values read by hand from that
commit: ``pipeline_parallel_microbatches`` unset → ``pipeline_parallel_degree`` micro-batches
(torchtitan/parallelisms/pipelining_utils.py:79-81), 1 stage per rank for ``1F1B`` and 2 for ``Interleaved1F1B``
(:22-27), ``generate_split_points``' cut of the 126 layers (:37-52: layers // stages to the first stage, one more to
each middle stage while the remainder lasts, the last stage what is left), and FSDP2 with ``reshard_after_forward=False``
under PP (parallelisms/parallelize_llama.py:325-339) — the planner's ZeRO-2.
"""

from __future__ import annotations

import pytest
from bench_support import bench_module

from planner.api import estimate_plan

bench = bench_module("bench_fidelity")
DATA = bench.load_all()
RUNS = {r["id"]: r for r in DATA["runs"]}

# 126 layers: 8 stages → base 15, remainder 6 to stages 1..6; 16 stages → base 7, remainder 14 to stages 1..14.
CUT_8 = [15, 16, 16, 16, 16, 16, 16, 15]
CUT_16 = [7] + [8] * 14 + [7]


@pytest.mark.parametrize(
    "layers, stages, cut",
    [
        (126, 8, CUT_8),
        (126, 16, CUT_16),
        (9, 4, [2, 3, 2, 2]),  # remainder 1: stage 1 only; the last stage takes 9 - 7
        (7, 4, [1, 2, 2, 2]),  # remainder 3: stages 1, 2 get one more, the last stage takes 7 - 5 = 2
        (32, 4, [8, 8, 8, 8]),
    ],
)
def test_split_layers_as_generate_split_points(layers, stages, cut):
    assert bench.titan_split_layers(layers, stages) == cut


@pytest.mark.parametrize(
    "run_id, micro, virtual, cut, global_batch",
    [
        # Table 5: local batch 32, global 256 (FSDP 8), pp 8 → 8 micro-batches of 4
        ("torchtitan_2412_t5_405b_512gpu_1f1b", 4, None, CUT_8, 256),
        ("torchtitan_2412_t5_405b_512gpu_interleaved_1f1b", 4, 2, CUT_16, 256),
        # Table 6: local batch 8 at every FSDP degree → 8 micro-batches of 1
        ("torchtitan_2412_t6_405b_fsdp8_cp1", 1, None, CUT_8, 64),
        ("torchtitan_2412_t6_405b_fsdp4_cp2", 1, None, CUT_8, 32),
        ("torchtitan_2412_t6_405b_fsdp2_cp4", 1, None, CUT_8, 16),
        ("torchtitan_2412_t6_405b_fsdp1_cp8", 1, None, CUT_8, 8),
    ],
)
def test_pipelined_rows_as_torchtitan_ran_them(run_id, micro, virtual, cut, global_batch):
    row = RUNS[run_id]
    assert bench.reasons_not_expressible(row) == []
    req = bench.request(row, DATA["gpus"])
    p = req.parallel
    assert (p.micro_batch_size, p.virtual_stages, p.stage_layers, p.zero_stage) == (micro, virtual, cut, 2)
    # the schedule runs pp micro-batches per step, the published global batch unchanged
    assert req.training.global_batch_size == global_batch
    assert global_batch // (p.dp * p.micro_batch_size) == p.pp == 8
    plan = estimate_plan(req)
    assert plan.parallel.stage_layers == cut and plan.parallel.zero_stage == 2 and plan.estimate.step_time_s > 0
    assumed = " ".join(bench.moe_row(row)["assumed"])
    assert "pipelining_utils.py:79-81" in assumed and "parallelize_llama.py:325-339" in assumed


@pytest.mark.parametrize(
    "run_id",
    [
        "torchtitan_2412_t4_70b_256gpu_asynctp",  # no PP: the local batch is the micro-batch
        "torchtitan_2408_405b_128h100_Float8",  # another group (no PP)
        "megatron_2020_dgxa100_8B",  # not torchtitan
    ],
)
def test_other_rows_unchanged(run_id):
    row = RUNS[run_id]
    assert bench.titan_pp_row(row) is row
