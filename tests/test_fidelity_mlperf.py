"""The MLPerf Training GPT-3 175B rows (v3.1, v4.0; NVIDIA Eos) as their submissions ran them (``bench/fidelity_mlperf.py``).

Expected values worked by hand from the sources: a training block holds ``val_check_interval`` = ceil(24576 / GBS)
steps of GBS × 2048 tokens (custom.yaml:17, custom_callbacks.py:119 at mlcommons/training_results_v3.1 d06288b), the
C4 SentencePiece vocabulary of 50257 padded to a multiple of 128 × TP (NeMo make_vocab_size_divisible_by), and GPT-3
175B's parameters: L (12 h² + 13 h) + V h + s h + 2 h (Megatron GPT with biases, learned positions, tied head).
"""

from __future__ import annotations

import math
import re

import pytest
from bench_support import bench_module

from planner.api import estimate_plan
from planner.workload.analytic import num_parameters

bench = bench_module("bench_fidelity")
mlperf = bench_module("fidelity_mlperf")
DATA = bench.load_all()
RUNS = {r["id"]: r for r in DATA["runs"]}
IDS = sorted(mlperf.BLOCKS)

# id: (GPUs, GBS, blocks per result file 0..2, the row's published whole-run tokens/s/GPU (None: v4.0 has none))
CASES = {
    "mlperf_v3.1_nvidia_gpt3_64nodes": (512, 2048, (24, 24, 24), 675.1),
    "mlperf_v3.1_nvidia_gpt3_96nodes": (768, 3072, (25, 25, 25), 672.1),
    "mlperf_v3.1_nvidia_gpt3_512nodes": (4096, 2048, (24, 24, 24), 573.8),
    "mlperf_v3.1_nvidia_gpt3_768nodes": (6144, 3072, (25, 25, 25), 567.2),
    "mlperf_v3.1_nvidia_gpt3_1024nodes": (8192, 4096, (26, 27, 26), 547.2),
    "mlperf_v3.1_nvidia_gpt3_1280nodes": (10240, 2560, (23, 23, 23), 482.2),
    "mlperf_v3.1_nvidia_gpt3_1344nodes": (10752, 2688, (22, 22, 22), 479.4),
    "mlperf_v4.0_nvidia_gpt3_64nodes": (512, 2304, (24, 23, 23), None),
    "mlperf_v4.0_nvidia_gpt3_1344nodes": (10752, 2688, (22, 22, 22), None),
    "mlperf_v4.0_nvidia_gpt3_1452nodes": (11616, 2904, (23, 23, 23), None),
}


def test_cases_cover_the_rows():
    assert set(CASES) == set(IDS) == {k for k in RUNS if k.startswith("mlperf_")}


@pytest.mark.parametrize("run_id", IDS)
def test_block_tokens_are_whole_evaluation_intervals(run_id):
    """Each file's block tokens = blocks × ceil(24576 / GBS) steps × GBS × 2048 (the benchmark's evaluation interval)."""
    n, gbs, blocks, _ = CASES[run_id]
    assert (RUNS[run_id]["cluster"]["num_gpus"], RUNS[run_id]["batch"]["global"]) == (n, gbs)
    per_block = math.ceil(24576 / gbs) * gbs * 2048
    assert [f[0] for f in mlperf.BLOCKS[run_id][1]] == [b * per_block for b in blocks]


@pytest.mark.parametrize(
    "run_id, tokens, block_ms, expected",
    [
        # Σ tokens / Σ block seconds / GPUs, by hand from the three files' MLLOG block intervals
        ("mlperf_v3.1_nvidia_gpt3_64nodes", 3 * 1207959552, 3187509 + 3193473 + 3190125, 739.5),
        ("mlperf_v3.1_nvidia_gpt3_512nodes", 3 * 1207959552, 469905 + 470358 + 471020, 626.9),
        ("mlperf_v3.1_nvidia_gpt3_1344nodes", 3 * 1211105280, 211046 + 210973 + 212057, 532.9),
        ("mlperf_v4.0_nvidia_gpt3_64nodes", 1245708288 + 2 * 1193803776, 2878141 + 2778751 + 2778412, 841.3),
        ("mlperf_v4.0_nvidia_gpt3_1452nodes", 3 * 1231110144, 191316 + 190899 + 191124, 554.6),
    ],
)
def test_training_throughput_by_hand(run_id, tokens, block_ms, expected):
    n = CASES[run_id][0]
    assert tokens / (block_ms / 1e3) / n == pytest.approx(expected, abs=0.05)
    assert mlperf.training_throughput(run_id, n) == pytest.approx(expected, abs=0.05)
    row = bench.moe_row(RUNS[run_id])
    assert row["measured"]["tokens_per_s_per_gpu"] == pytest.approx(expected, abs=0.05)
    assert bench.evaluate(RUNS[run_id], DATA["gpus"]).measured == pytest.approx(expected, abs=0.05)


@pytest.mark.parametrize("run_id", IDS)
def test_whole_run_figure_is_the_rows_and_includes_evaluation(run_id):
    """result_0's trained tokens over run_start → run_stop is the figure the v3.1 rows carry; the training-only
    figure is higher by the evaluation and start-up the run's timed region holds (8 to 14 %)."""
    n, _, _, published = CASES[run_id]
    whole = mlperf.whole_run_throughput(run_id, n)
    if published is not None:
        assert whole == pytest.approx(published, abs=0.05)
    else:
        assert RUNS[run_id]["measured"]["tokens_per_s_per_gpu"] is None
    ratio = mlperf.training_throughput(run_id, n) / whole
    assert 1.07 < ratio < 1.15


@pytest.mark.parametrize("tp, padded", [(1, 50304), (2, 50432), (4, 50688), (8, 51200)])
def test_padded_vocab(tp, padded):
    # the next multiple of 128·tp at or above 50257
    assert padded % (128 * tp) == 0 and padded - 128 * tp < 50257 <= padded
    assert mlperf.padded_vocab(tp) == padded


@pytest.mark.parametrize("run_id", IDS)
def test_parameters_are_gpt3_175b(run_id):
    req = bench.request(RUNS[run_id], DATA["gpus"])
    m = req.model
    h, L, V, s = 12288, 96, 50688, 2048
    assert (m.hidden_size, m.num_layers, m.vocab_size, m.ffn_hidden_size, m.tie_embeddings) == (h, L, V, 4 * h, True)
    by_hand = L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h
    assert num_parameters(m) == pytest.approx(by_hand, rel=1e-3)
    assert by_hand == pytest.approx(175e9, rel=0.005)


@pytest.mark.parametrize(
    "run_id, pp, vp, micro",
    [
        ("mlperf_v3.1_nvidia_gpt3_64nodes", 8, 12, 1),
        ("mlperf_v3.1_nvidia_gpt3_1344nodes", 8, 12, 1),
        ("mlperf_v4.0_nvidia_gpt3_64nodes", 8, 4, 2),
        ("mlperf_v4.0_nvidia_gpt3_1452nodes", 6, 8, 1),
    ],
)
def test_requests_as_the_submissions_ran(run_id, pp, vp, micro):
    row = RUNS[run_id]
    assert bench.reasons_not_expressible(row) == []
    req = bench.request(row, DATA["gpus"])
    p = req.parallel
    pins = (p.tp, p.pp, p.virtual_stages, p.micro_batch_size, p.recompute, p.zero_stage)
    assert pins == (4, pp, vp, micro, "none", 1)
    assert p.sequence_parallel and p.tp_comm_overlap and p.schedule == "interleaved-1f1b"
    assert (req.training.precision, req.training.fp8_recipe) == ("fp8", "delayed")
    # apex DistributedFusedAdam's overlap_grad_sync / overlap_param_sync and grad_sync_dtype bf16 (cost model 54)
    over = {"base": "megatron", "overlap_grad_reduce": True, "overlap_param_gather": True, "reduce_dtype": "param"}
    # interleaved 1F1B all forwards first at m = pp: Megatron-LM df7271285d / core_v0.7.0.beta (cost model 68);
    # the even split only, no interleaving on two stages: NeMo bd0b818's GPT / core_v0.7.0.beta (cost model 71)
    assert bench.stack_of(row) == over | {"interleaved_all_warmup": True, "even_stages": True, "interleaved_min_pp": 3}
    assert 96 % (pp * vp) == 0  # whole layers per chunk
    assert estimate_plan(req).estimate.fits


@pytest.mark.parametrize("run_id", IDS)
def test_every_filled_value_is_cited(run_id):
    """Each assumption names its file and line(s), the commit is named, and nothing is filled twice."""
    row = bench.moe_row(RUNS[run_id])
    assumed = row["assumed"]
    commit = mlperf.V31 if "v3.1" in run_id else mlperf.V40
    assert any(commit[:9] in a for a in assumed)
    for key in ("measured.tokens_per_s_per_gpu", "model.vocab", "parallel.recompute", "parallel.zero_stage"):
        assert sum(a.startswith(key) for a in assumed) == 1, key
    cited = [a for a in assumed if not a.startswith(("measured.tflops_accounting", "model.vocab", "measured."))]
    assert all(re.search(r"\.(sh|yaml|py|md)(:\d+|\b)", a) for a in cited), cited
    assert bench.moe_row(row) == row  # idempotent
