"""Interleaved 1F1B's warm-up as torch.distributed.pipelining runs it (cost model 67, ``compose.pp_order``).

``torch_rank_ops`` transcribes torch 2.6.0's ``ScheduleInterleaved1F1B._calculate_single_rank_operations`` and
``_get_1f1b_rank_ops`` (``distributed/pipelining/schedules.py:1752-1886``, :1919-2001; the None padding and the
zero-bubble branches left out, the order of the actions kept) line by line, independently of the planner's order;
the memory walk's order (``peak_walk.rank_arrays``) must be it, op by op, and the peaks its copies written out by hand.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from bench_support import bench_module

from planner.api import estimate_plan
from planner.compose.grad_peaks import live_and_done
from planner.compose.peak_walk import rank_arrays, walk_states
from planner.compose.pp_order import CAPPED, interleaved_warmup
from planner.compose.simulate import rank_orders
from planner.search.prescreen import warm_peaks
from planner.search.screens import interleaved_peak_copies
from planner.specs.stacks import STACKS, resolve


def torch_rank_ops(pp: int, v: int, m: int, rank: int) -> list[tuple[int, str, int]]:
    """(stage, "F"/"B", micro-batch) of rank's actions in torch 2.6.0's ScheduleInterleaved1F1B."""
    rounds = max(1, m // pp)  # :1926-1928
    per_round = m // rounds
    warmup_ops = min((v - 1) * per_round + 2 * ((pp - 1) - rank), m * v)  # get_rank_warmup_ops :1944-1956
    microbatch_ops = v * m
    fwd_bwd_ops = microbatch_ops - warmup_ops
    cooldown_ops = microbatch_ops - fwd_bwd_ops

    def forward_stage_index(step: int) -> int:  # :1975-1978
        return ((step // per_round) % v) * pp + rank

    def backward_stage_index(step: int) -> int:  # :1980-1987
        return (v - 1 - ((step - warmup_ops) // per_round) % v) * pp + rank

    fwd_mb: dict[int, int] = defaultdict(int)
    bwd_mb: dict[int, int] = defaultdict(int)
    ops = []
    for op in range(warmup_ops + fwd_bwd_ops + cooldown_ops):  # _get_1f1b_rank_ops :1795-1860
        if op < warmup_ops:
            s = forward_stage_index(op)
            ops.append((s, "F", fwd_mb[s]))
            fwd_mb[s] += 1
        elif op < warmup_ops + fwd_bwd_ops:  # FORWARD appended before FULL_BACKWARD
            s = forward_stage_index(op)
            ops.append((s, "F", fwd_mb[s]))
            fwd_mb[s] += 1
            s = backward_stage_index(op)
            ops.append((s, "B", bwd_mb[s]))
            bwd_mb[s] += 1
        else:
            s = backward_stage_index(op)
            ops.append((s, "B", bwd_mb[s]))
            bwd_mb[s] += 1
    return ops


SHAPES = [(pp, v, m) for pp in (2, 3, 4, 8) for v in (2, 3) for m in (pp, 2 * pp, 3 * pp)]


@pytest.mark.parametrize("pp, v, m", SHAPES)
def test_memory_walk_runs_torchs_order(pp, v, m):
    for r in range(pp):
        ops = torch_rank_ops(pp, v, m, r)
        fwd, chunks = rank_arrays(CAPPED, pp, v, m, r)
        assert [k == "F" for _, k, _ in ops] == fwd.tolist()
        assert [s // pp for s, _, _ in ops] == chunks.tolist()
        # micro-batches and chunks as Megatron's order has them, but for the warm-up's length
        assert sum(1 for _, k, _ in ops[: interleaved_warmup(pp, v, m, r, False)] if k == "B") == 0
        if m != pp:  # the two orders differ only at m = pp (Megatron's all-forwards rule)
            assert [(c, k, j) for k, j, c in rank_orders("interleaved-1f1b", pp, v, m)[r]] == ops


@pytest.mark.parametrize(
    "pp, v, m, rank, torch_warm, megatron_warm, torch_copies",
    [
        # (v - 1)·pp + 2(pp - 1 - r), capped at m·v; Megatron: m·v when m = pp; copies: warm-up + 1 forward
        (8, 2, 8, 7, 8, 16, 9),  # torchtitan 2412 405B interleaved: rank 7 runs F(stage 7, 0..7) then F/B pairs
        (8, 2, 8, 6, 10, 16, 11),
        (8, 2, 8, 4, 14, 16, 15),
        (8, 2, 8, 3, 16, 16, 16),  # 8 + 8 = 16: every forward first on ranks 0-3 either way
        (8, 2, 8, 0, 16, 16, 16),
        (4, 2, 4, 3, 4, 8, 5),
        (4, 3, 4, 3, 8, 12, 9),
        (4, 2, 8, 3, 4, 4, 5),  # m = 2·pp: the two orders agree
    ],
)
def test_warmup_and_peak_copies_by_hand(pp, v, m, rank, torch_warm, megatron_warm, torch_copies):
    assert interleaved_warmup(pp, v, m, rank, False) == torch_warm
    assert interleaved_warmup(pp, v, m, rank, True) == megatron_warm
    assert interleaved_peak_copies(pp, v, m, rank, False) == torch_copies
    live, _ = live_and_done(CAPPED, pp, v, m)
    assert max(sum(x for _, x in peak) for peak in live[rank]) == torch_copies


def test_last_rank_peaks_of_the_405b_shape():
    """pp 8, v 2, m 8, rank 7 (chunks 7 and 15): F(7, 0..7) F(15, 0) B(15, 0) … F(15, 7) B(15, 7) B(7, 0..7). Its
    peaks: after each F(15, k), 8 copies of chunk 7 and 1 of chunk 15 (chunk 15's gradients allocated from k = 1 on,
    the undominated one); right after B(7, 0), 7 copies of chunk 7 and both chunks' gradients. Megatron's order: 8 + 8
    copies before any backward."""
    live, done = live_and_done(CAPPED, 8, 2, 8)
    assert dict(zip(live[7], done[7])) == {((7, 7), (15, 0)): (7, 15), ((7, 8), (15, 1)): (15,)}
    live, done = live_and_done("interleaved-1f1b", 8, 2, 8)
    assert ((7, 8), (15, 8)) in live[7]


@pytest.mark.parametrize("pp, v, m", SHAPES)
def test_warm_peak_is_a_state_of_torchs_walk(pp, v, m):
    """``prescreen.warm_peaks(all_warmup=False)`` (the screens' lower bound) is a peak of every rank's torch walk."""
    live, _ = warm_peaks(pp, v, m, False)
    for r in range(pp):
        _, acts = walk_states(CAPPED, pp, v, m, r)
        ((peak,),) = (live[r],)
        counts = dict(peak)
        assert tuple(counts.get(j * pp + r, 0) for j in range(v)) in {alive for _, alive in acts}


def megatron_v25_warmup(pp: int, v: int, m: int, rank: int) -> int:
    """Megatron-LM v2.5 (e269e20064) megatron/schedules.py:163-178, the same at 52e636888c :288-304, core 338af514
    megatron/core/pipeline_parallel/schedules.py:595-605, df7271285d :493-505 and core_v0.7.0.beta :524-534
    (``num_microbatches`` there is m·v at v2.5, m in core, where ``total_num_microbatches`` = m·v)."""
    total = m * v
    if m == pp:
        return total
    warm = (pp - rank - 1) * 2
    warm += (v - 1) * pp
    return min(warm, total)


def megatron_core_0161_warmup(pp: int, v: int, m: int, rank: int, group: int | None = None) -> int:
    """Megatron-core core_v0.16.1 ``get_pp_rank_microbatches`` (pipeline_parallel/schedules.py:757-787, interleaved,
    no MoE overlap), ``microbatch_group_size_per_vp_stage`` = pp when unset (model_parallel_config.py:447-448)."""
    group = pp if group is None else group
    total = m * v
    warm = (pp - rank - 1) * 2
    warm += (v - 1) * group
    if warm >= total:
        warm = total
    return warm


def torch_warmup(pp: int, v: int, m: int, rank: int) -> int:
    """torch 2.6.0 ScheduleInterleaved1F1B get_rank_warmup_ops (:1926-1928, :1944-1956)."""
    per_round = m // max(1, m // pp)
    return min((v - 1) * per_round + 2 * ((pp - 1) - rank), m * v)


#: each preset's interleaved 1F1B, as the code its version names runs it (cost model 68)
PRESET_WARMUP = {
    "megatron": megatron_core_0161_warmup,
    "megatron-2021": megatron_v25_warmup,
    "megatron-2022": megatron_v25_warmup,
    "nemo-2407": megatron_v25_warmup,
    "torchtitan": torch_warmup,
    "meshplan": torch_warmup,  # runtime/job.py builds torch 2.13's ScheduleInterleaved1F1B (_get_warmup_ops: the same)
}


@pytest.mark.parametrize("preset", sorted(PRESET_WARMUP))
def test_each_preset_warms_up_as_its_code(preset):
    stack = STACKS[preset]
    assert "interleaved-1f1b" in stack.schedules
    for pp in (2, 3, 4, 6, 8):
        for v in (2, 3, 5, 12):
            for m in (pp, 2 * pp, 3 * pp, 16 * pp):
                for rank in range(pp):
                    got = interleaved_warmup(pp, v, m, rank, stack.interleaved_all_warmup)
                    assert got == PRESET_WARMUP[preset](pp, v, m, rank), (pp, v, m, rank)


@pytest.mark.parametrize(
    "pp, v, m, rank, v25, core",
    [
        # hand counts: v2.5 / core 338af514: m·v at m = pp; core 0.16.1: 2(pp-1-r) + (v-1)·pp, at most m·v
        (6, 8, 6, 5, 48, 42),  # MLPerf v4.0 1344 nodes' shape, last rank: 7·6 = 42 of 48
        (6, 8, 6, 0, 48, 48),  # first rank: 10 + 42 = 52, capped at 48
        (8, 12, 8, 7, 96, 88),  # MLPerf v3.1 1280 nodes: 11·8 = 88 of 96
        (8, 12, 8, 3, 96, 96),  # 8 + 88 = 96
        (8, 5, 128, 7, 32, 32),  # Megatron-Bridge Llama 3 70B (m ≫ pp): the versions agree
        (4, 2, 8, 0, 10, 10),
    ],
)
def test_versions_by_hand(pp, v, m, rank, v25, core):
    assert megatron_v25_warmup(pp, v, m, rank) == v25 == interleaved_warmup(pp, v, m, rank, True)
    assert megatron_core_0161_warmup(pp, v, m, rank) == core == interleaved_warmup(pp, v, m, rank, False)
    assert torch_warmup(pp, v, m, rank) == core  # core 0.16.1 with the default group = torch's count


def test_presets_without_interleaving_and_meshplan():
    assert STACKS["megatron"].interleaved_all_warmup is False
    assert STACKS["torchtitan"].interleaved_all_warmup is False
    assert STACKS["meshplan"].interleaved_all_warmup is False  # the runtime's torch class
    for preset in ("megatron-2020", "deepspeed", "deepspeed-2021"):
        assert "interleaved-1f1b" not in STACKS[preset].schedules


def test_mlperf_rows_run_all_warmup():
    """MLPerf v3.1 (Megatron-LM df7271285d) and v4.0 (core_v0.7.0.beta) keep the m = pp rule; the Megatron-Bridge
    rows (2025-26 code) run the megatron preset's."""
    bench = bench_module("bench_fidelity")
    data = bench.load_all()
    seen = set()
    for row in data["runs"]:
        if row["source_group"] in ("mlperf-3.1", "mlperf-4.0", "megatron-bridge") and row["stack"] == "megatron":
            stack = resolve(bench.stack_of(bench.mlperf_row(row)))
            assert stack.interleaved_all_warmup is row["source_group"].startswith("mlperf")
            seen.add(row["source_group"])
    assert seen == {"mlperf-3.1", "mlperf-4.0", "megatron-bridge"}


def test_405b_interleaved_row_last_rank_bytes():
    """torchtitan 2412 Table 5 interleaved (TP 8 with SP, PP 8 × 2 chunks of 8 and 7 layers on rank 7, 8 micro-batches
    of 4 × 8192, full recomputation): rank 7's peak is right after B(7, 0) — 7 micro-batches of chunk 7 alive, each
    layer's checkpointed input [4, 8192 / 8, 16384] in bf16 — with every gradient of the rank allocated."""
    bench = bench_module("bench_fidelity")
    data = bench.load_all()
    row = next(r for r in data["runs"] if r["id"] == "torchtitan_2412_t5_405b_512gpu_interleaved_1f1b")
    est = estimate_plan(bench.request(bench.mlperf_row(row), data["gpus"])).estimate
    last = est.memory_per_stage[7]
    layer_input = 4 * (8192 // 8) * 16384 * 2
    assert last.activations_gib * 2**30 == pytest.approx(7 * 8 * layer_input, rel=1e-4)
    assert last.gradients_gib == pytest.approx(est.memory_per_stage[0].gradients_gib, rel=1e-3)  # the whole stage's
    assert est.peak_memory_gib == pytest.approx(last.total_gib)
