"""Sliding-window attention (issue 23: gpt-oss, Mistral 7B v0.1, Qwen2/3's ``use_sliding_window``), end to end:

- the spec (``ModelSpec.sliding_window``, ``window_first_layer``, ``window_layer_freq``): which layers, refusals
  naming the field, dense dumps unchanged; the Hugging Face configs we hold and transformers' rules for the others;
- the count: ``ops.causal_pairs`` against a brute force over (query, key) pairs and against the runtime's mask;
- the runtime's windowed attention against an independent softmax written here (with gpt-oss's sinks too);
- the pricing: a windowed block's attention FLOPs and flash time at its share of the pairs, the mixed model's terms
  per kind (gpt-oss: every other layer), CP only with the exchanges a stack runs on a window;
- the planner's exactness over windowed and full layers (the brute force over the same layer sequence).

The zoo's TP/PP runs of a windowed model against one process are rows of tests/test_runtime_equivalence_attn.py."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from planner.specs import ModelSpec
from planner.specs.catalog import get_model
from planner.specs.errors import MeshplanError
from planner.specs.hf import from_hf_config
from planner.workload.ops import attention_core_flops, causal_pairs, window_share

HF = Path(__file__).parent / "data" / "hf_configs"

_TINY = dict(
    name="tiny-swa",
    family="llama",
    num_layers=6,
    hidden_size=64,
    num_attention_heads=4,
    num_kv_heads=2,
    ffn_hidden_size=128,
    vocab_size=256,
    activation="swiglu",
    norm="rmsnorm",
    max_seq_len=4096,
)


def tiny(**extra) -> ModelSpec:
    return ModelSpec.model_validate({**_TINY, **extra})


# ---------------------------------------------------------------------------------------------------------------
# The spec


def test_which_layers_have_the_window() -> None:
    every = tiny(sliding_window=16)
    assert [every.is_window_layer(i) for i in range(6)] == [True] * 6
    alternating = tiny(sliding_window=16, window_layer_freq=2)  # gpt-oss: layers 0, 2, 4
    assert [i for i in range(6) if alternating.is_window_layer(i)] == [0, 2, 4]
    qwen = tiny(sliding_window=16, window_first_layer=4)  # Qwen2's max_window_layers: layers ≥ 4
    assert [i for i in range(6) if qwen.is_window_layer(i)] == [4, 5]
    assert tiny().window_layers() == 0 and alternating.window_layers() == 3
    assert every.window_at(4096) == 16 and every.window_at(16) is None  # w ≥ s: plainly causal


def test_a_dense_model_dumps_as_before() -> None:
    dumped = tiny().model_dump()
    assert not {"sliding_window", "window_first_layer", "window_layer_freq"} & set(dumped)
    assert tiny(sliding_window=16, window_layer_freq=2).model_dump()["window_layer_freq"] == 2


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (dict(window_layer_freq=2), "window_layer_freq"),
        (dict(window_first_layer=1), "window_first_layer"),
        (dict(sliding_window=16, window_first_layer=6), "window_first_layer"),
        (dict(sliding_window=0), "sliding_window"),
    ],
)
def test_bad_windows_are_refused_naming_the_field(extra: dict, field: str) -> None:
    from pydantic import ValidationError

    from planner.specs.errors import validation_errors

    with pytest.raises(ValidationError) as err:
        tiny(**extra)
    problems = validation_errors(err.value)
    assert any(field in p["field"] for p in problems), problems
    assert all(p["fix"] for p in problems)


def test_the_catalog_gpt_oss_models_alternate_windows_as_their_configs_say() -> None:
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        cfg = json.loads((HF / f"{name}.json").read_text())
        spec = get_model(name)
        read = from_hf_config(cfg, name=name)
        assert read.model_dump() == spec.model_dump()
        assert [spec.is_window_layer(i) for i in range(spec.num_layers)] == [
            t == "sliding_attention" for t in cfg["layer_types"]
        ]
        assert spec.sliding_window == cfg["sliding_window"] == 128


@pytest.mark.parametrize(
    ("name", "window"),
    [("mistral-7b-instruct-v0.3", None), ("qwen2.5-7b", None), ("qwen3-8b", None), ("mixtral-8x7b-v0.1", None)],
)
def test_the_held_configs_without_a_window(name: str, window: int | None) -> None:
    # mistral v0.3 and mixtral: "sliding_window": null; Qwen2.5-7B: 131072 with use_sliding_window false; Qwen3: false
    assert from_hf_config(json.loads((HF / f"{name}.json").read_text())).sliding_window is window


def test_transformers_rules_for_the_configs_we_do_not_hold() -> None:
    mistral = json.loads((HF / "mistral-7b-instruct-v0.3.json").read_text())
    v01 = {**mistral, "sliding_window": 4096, "vocab_size": 32000}  # Mistral-7B-v0.1: 4096 on every layer
    spec = from_hf_config(v01)
    assert spec.sliding_window == 4096 and spec.window_layers() == 32
    no_key = {k: v for k, v in mistral.items() if k != "sliding_window"}
    assert from_hf_config(no_key).sliding_window == 4096  # MistralConfig's default
    qwen = json.loads((HF / "qwen2.5-7b.json").read_text())
    on = from_hf_config({**qwen, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert on.sliding_window == 4096 and on.window_first_layer == 20 and on.window_layers() == 8
    typed = {**qwen, "use_sliding_window": True, "layer_types": ["full_attention"] * 28}
    assert from_hf_config(typed).sliding_window is None  # layer_types win over max_window_layers
    gpt = json.loads((HF / "gpt-oss-20b.json").read_text())
    defaulted = from_hf_config({k: v for k, v in gpt.items() if k not in ("layer_types", "sliding_window")})
    assert defaulted.sliding_window == 128 and defaulted.window_layer_freq == 2


def test_irregular_layer_types_are_refused_naming_the_key() -> None:
    from planner.specs.errors import FieldValueError

    gpt = json.loads((HF / "gpt-oss-20b.json").read_text())
    types = list(gpt["layer_types"])
    types[4] = "full_attention"
    with pytest.raises(FieldValueError) as err:
        from_hf_config({**gpt, "layer_types": types})
    assert err.value.sub == "hf_config.layer_types" and "describe the model as a ModelSpec" in str(err.value)
    with pytest.raises(FieldValueError) as err:
        from_hf_config({**gpt, "sliding_window": -3})
    assert err.value.sub == "hf_config.sliding_window"
    with pytest.raises(FieldValueError) as err:
        from_hf_config({**gpt, "layer_types": ["chunked_attention"] * 24})
    assert err.value.sub == "hf_config.layer_types"


# ---------------------------------------------------------------------------------------------------------------
# The count


@pytest.mark.parametrize("seq", [1, 2, 7, 16, 33, 128])
@pytest.mark.parametrize("window", [None, 1, 3, 16, 128, 500])
def test_causal_pairs_against_a_brute_force(seq: int, window: int | None) -> None:
    w = seq if window is None else window
    brute = sum(1 for i in range(seq) for j in range(seq) if j <= i and i - j < w)
    assert causal_pairs(seq, window) == brute
    assert window_share(seq, window) == pytest.approx(brute / (seq * (seq + 1) / 2))


def test_the_runtime_mask_holds_the_counted_pairs() -> None:
    from runtime.models.transformer import banded_causal_mask

    for t, w in ((9, 3), (32, 8), (40, 1), (12, 12)):
        mask = banded_causal_mask(t, w)
        assert int(mask.sum()) == causal_pairs(t, w)
        assert [int(r.sum()) for r in mask] == [min(i + 1, w) for i in range(t)]  # query i: min(i + 1, w) keys
        sink = banded_causal_mask(t, w, sink=True)
        assert sink.shape == (t + 1, t + 1) and bool(sink[:, 0].all()) and int(sink[1:, 1:].sum()) == causal_pairs(t, w)


def test_windowed_flops_are_the_share_of_the_square() -> None:
    m = tiny(sliding_window=128)
    full = attention_core_flops(m, 2, 4096, 1)
    assert full == 4.0 * 2 * 4096**2 * 16 * 4
    share = window_share(4096, 128)
    assert attention_core_flops(m, 2, 4096, 1, share) == pytest.approx(full * share)
    # the band's pairs ≈ s·w of the square's s²/2: about 2w/s of the work
    assert share == pytest.approx(2 * 128 / 4096, rel=0.02)


# ---------------------------------------------------------------------------------------------------------------
# The runtime's attention against an independent softmax


def _reference(q, k, v, window: int | None, sinks=None):
    """Softmax attention written out: scores over every key, −inf outside causal ∩ window, the sink logit per head
    as one more column of the softmax (Hugging Face's gpt-oss ``eager_attention_forward``), dropped after."""
    import torch

    b, h, t, d = q.shape
    rep = h // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    allowed = torch.zeros(t, t, dtype=torch.bool)
    for i in range(t):
        for j in range(t):
            allowed[i, j] = j <= i and (window is None or i - j < window)
    scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        scores = torch.cat((scores, sinks.view(1, h, 1, 1).expand(b, h, t, 1)), dim=-1)
    probs = torch.softmax(scores, dim=-1)
    return probs[..., :t] @ v


@pytest.mark.parametrize("window", [1, 4, 11, 64])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_windowed_attention_matches_the_written_out_softmax(window: int, with_sinks: bool) -> None:
    import torch

    from runtime.models.transformer import Attention

    g = torch.Generator().manual_seed(window)
    q = torch.randn(2, 4, 19, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 19, 8, generator=g, dtype=torch.float64) for _ in range(2))
    sinks = torch.randn(4, generator=g, dtype=torch.float64) if with_sinks else None
    got = Attention(window)(q, k, v) if sinks is None else Attention(window)(q, k, v, sinks)
    want = _reference(q, k, v, window, sinks)
    assert torch.allclose(got, want, atol=1e-10), float((got - want).abs().max())
    if window < 19:  # the window really cuts: the causal answer differs
        assert not torch.allclose(_reference(q, k, v, None, sinks), want, atol=1e-6)


def test_the_zoo_puts_the_window_on_the_spec_layers() -> None:
    from runtime.models import build_model

    model = build_model(tiny(sliding_window=8, window_layer_freq=2), seed=0)
    assert [model.layers[str(i)].attn.core.window for i in range(6)] == [8, None, 8, None, 8, None]


def test_the_runtime_runs_cp_with_a_window_but_not_with_sinks() -> None:
    """The bundled runtime's CP exchanges narrow their position mask to the band (``context_parallel.sees``; the
    equivalence rows ``swa-cp2-*`` of tests/test_runtime_equivalence_attn.py run them), so the meshplan stack runs
    every exchange with a window; sinks stay refused under CP, window or not."""
    import torch

    from planner.specs.config import RUNNABLE_CP_COMMS
    from planner.specs.stacks import STACKS
    from runtime.context_parallel import sees
    from runtime.models.transformer import banded_causal_mask
    from runtime.testing import make_plan
    from runtime.validate import validate_plan

    assert set(STACKS["meshplan"].cp_window_comms) == set(RUNNABLE_CP_COMMS)
    pos = torch.arange(40)
    assert torch.equal(sees(pos, pos, 8), banded_causal_mask(40, 8)) and torch.equal(
        sees(pos, pos, None), pos[:, None] >= pos
    )
    model = tiny(sliding_window=8)
    plan = make_plan(model, cp=2, cp_comm="all_gather")
    validate_plan(plan, 2)
    with pytest.raises(MeshplanError) as err:
        validate_plan(plan.model_copy(update={"model": model.model_copy(update={"attention_sinks": True})}), 2)
    assert err.value.field == "parallel.cp"


# ---------------------------------------------------------------------------------------------------------------
# Pricing


def _ctx(model: ModelSpec, seq: int, stack: str = "megatron", nodes: int = 1):
    from planner.compose.cost import Context
    from planner.specs import ClusterSpec, TrainingSpec
    from planner.specs.catalog import get_gpu

    gpu = get_gpu("h100-sxm5-80gb")
    training = TrainingSpec(global_batch_size=64, seq_len=seq, stack=stack)
    return Context(
        model=model, gpu=gpu, cluster=ClusterSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=8), training=training
    )


def test_flash_time_of_a_windowed_model() -> None:
    """Mistral-7B-v0.1-shaped (4096 on every layer) at 32K: the attention's time is its FLOPs share at the causal
    rate of 2·w; at s ≤ w nothing changes."""
    from planner.pricing.gpu import attention_time, flash_rate

    mistral = ModelSpec.model_validate(
        {**_TINY, "name": "mistral-7b-v0.1", "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_kv_heads": 8, "ffn_hidden_size": 14336, "vocab_size": 32000, "max_seq_len": 32768}
    )  # fmt: skip
    windowed = mistral.model_copy(update={"sliding_window": 4096})
    full_ctx, win_ctx = _ctx(mistral, 32768), _ctx(windowed, 32768)
    assert win_ctx.attention_window == 4096 and full_ctx.attention_window is None
    f_full, b_full = attention_time(full_ctx, 1, 1)
    f_win, b_win = attention_time(win_ctx, 1, 1)
    share = causal_pairs(32768, 4096) / causal_pairs(32768)
    flops = attention_core_flops(mistral, 1, 32768, 1)
    rate = flash_rate(win_ctx, 128, 8192)
    assert rate is not None
    assert f_win == pytest.approx(flops * share / 2 / (rate * 1e12))
    assert b_win / f_win == pytest.approx(b_full / f_full)
    assert f_win < 0.3 * f_full  # a 4K band of a 32K sequence
    short = _ctx(windowed, 4096)
    assert attention_time(short, 1, 1) == attention_time(_ctx(mistral, 4096), 1, 1)
    # the bundled runtime runs SDPA with a boolean mask, which computes every block: no discount there
    assert attention_time(_ctx(windowed, 32768, "meshplan"), 1, 1) == attention_time(
        _ctx(mistral, 32768, "meshplan"), 1, 1
    )


def test_gpt_oss_blocks_are_two_kinds_and_a_stage_sums_them() -> None:
    from planner.compose.blocks import WINDOW, block_sequence
    from planner.compose.cost import Candidate
    from planner.compose.terms import kind_terms, shared_key, shared_terms

    ctx = _ctx(get_model("gpt-oss-20b"), 32768)
    kinds, prefix = block_sequence(ctx)
    assert kinds == ("moe_block", "moe_block" + WINDOW)
    assert prefix is not None and prefix[-1] == 12 and prefix[:4] == (0, 1, 1, 2)
    cand = Candidate(tp=2, pp=2, dp=4, micro_batch_size=1, schedule="1f1b", virtual_stages=1, recompute="none",
                     sequence_parallel=True, zero_stage=1, ep=4)  # fmt: skip
    key = shared_key(cand)
    s = shared_terms(ctx, *key)
    full, win = kind_terms(ctx, key, kinds[0]), kind_terms(ctx, key, kinds[1])
    assert win.fwd.layer < full.fwd.layer and win.bwd.layer < full.bwd.layer  # the band is cheaper
    assert s.fwd.layer == full.fwd.layer and s.fwd.moe == win.fwd.layer - full.fwd.layer
    assert win.acts.layer == full.acts.layer and win.states.layer == full.states.layer  # flash: memory alike
    # the short sequence: 128 ≥ s, one kind
    assert block_sequence(_ctx(get_model("gpt-oss-20b"), 128))[1] is None
    assert block_sequence(_ctx(get_model("gpt-oss-20b"), 32768, "meshplan"))[1] is None  # its kernel: whole squares


def test_cp_with_a_window_only_where_the_stack_runs_it() -> None:
    from planner.api import plan as plan_request

    def plan(stack: str, model: object = "gpt-oss-20b", seq: int = 65536, **pins):
        return plan_request(
            {
                "model": model,
                "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
                "training": {"global_batch_size": 64, "seq_len": seq, "stack": stack},
                "parallel": pins,
                "top_k": 8,
                "options": {"num_workers": 1, "time_limit_s": 30},
            }
        )

    got = plan("megatron")
    comms = {p.parallel.cp_comm for p in got.plans if p.parallel.cp > 1}
    assert comms and comms <= {"all_gather", "a2a"}  # TE's ring refuses a window
    with pytest.raises(MeshplanError) as err:
        plan("megatron", cp=2, cp_comm="p2p")
    assert err.value.field == "parallel.cp_comm"
    with pytest.raises(MeshplanError) as err:  # torchtitan: torch's ring attention takes is_causal, no window
        plan("torchtitan", tiny(sliding_window=64).model_dump(), 4096, cp=2)
    assert err.value.field == "parallel.cp" and "sliding-window" in err.value.message
    # the bundled runtime runs every exchange with the window in its position mask
    assert plan("meshplan", tiny(sliding_window=64).model_dump(), 4096, cp=2, cp_comm="p2p").plans


def test_the_mfu_numerator_counts_the_band() -> None:
    from planner.workload.analytic import model_flops_per_step

    m = tiny(sliding_window=64, window_layer_freq=2)
    full = tiny()
    per_layer_full = attention_core_flops(full, 1, 1024, 1) * 3 * 8  # 8 sequences of 1024, fwd + bwd = 3×
    less = model_flops_per_step(full, 8192, 1024) - model_flops_per_step(m, 8192, 1024)
    assert less == pytest.approx(3 * per_layer_full * (1 - window_share(1024, 64)))


# ---------------------------------------------------------------------------------------------------------------
# Exactness of the search over windowed and full layers


def window_instance(seed: int):
    from planner.compose.cost import Context
    from planner.specs import ClusterSpec, GpuSpec, ParallelPins, TrainingSpec
    from planner.specs.catalog import get_gpu

    rng = random.Random(9100 + seed)
    # large enough that the attention, not the kernel launches, sets a block's time (the band must show)
    heads = rng.choice([8, 16])
    layers = rng.randint(5, 7)
    pattern = dict(window_layer_freq=2) if seed % 2 else dict(window_first_layer=rng.randint(1, 3))
    model = ModelSpec.model_validate(
        {**_TINY, "name": f"swa-{seed}", "num_layers": layers, "hidden_size": 128 * heads,
         "num_attention_heads": heads, "num_kv_heads": heads, "ffn_hidden_size": rng.choice([512, 4096]),
         "max_seq_len": 8192, "sliding_window": rng.choice([256, 512]), **pattern}
    )  # fmt: skip
    gpu = get_gpu("h100-sxm5-80gb").model_copy(
        update={
            "id": f"toy-swa-{seed}",
            "memory_gib": rng.choice([2.5, 5.0, 10.0, 80.0]),
            "nvlink_bandwidth_GBps": rng.choice([1.0, 50.0]),
            "nic_bandwidth_GBps": rng.choice([0.1, 5.0]),
        }
    )
    cluster = ClusterSpec(gpu=gpu, num_nodes=rng.choice([1, 2]), gpus_per_node=rng.choice([2, 4]))
    training = TrainingSpec(global_batch_size=rng.choice([8, 16]), seq_len=rng.choice([4096, 8192]),
                            stack=rng.choice(["megatron", "torchtitan"]))  # fmt: skip
    ctx = Context(model=model, gpu=GpuSpec.model_validate(gpu.model_dump()), cluster=cluster, training=training)
    return ctx, ParallelPins()


@pytest.mark.parametrize("seed", range(8))
def test_search_over_windowed_layers_matches_brute_force(seed: int) -> None:
    from planner.compose.blocks import block_sequence
    from tests.test_planner_exact import search_against_brute_force

    ctx, pins = window_instance(seed)
    assert block_sequence(ctx)[1] is not None  # really two kinds
    got, ref = search_against_brute_force(ctx, pins)
    if ref:
        assert got.status == "OPTIMAL"
        assert got.objective_ns == got.bound_ns == ref[0][0]


def test_the_window_instances_are_not_vacuous() -> None:
    """Every instance has a fitting plan, several a pipeline, and on several the best cut of a class is not the one
    it would be were every layer full: where the cut puts the windowed layers decides it."""
    from planner.compose.cost import Context, class_costs, evaluate
    from planner.search.bruteforce import brute_force, compositions
    from planner.specs import SearchOptions

    feasible = piped = moved = 0
    for seed in range(8):
        ctx, pins = window_instance(seed)
        ref, _ = brute_force(ctx, pins, SearchOptions())
        if not ref:
            continue
        feasible += 1
        piped += ref[0].cand.pp > 1
        full_model = ctx.model.model_copy(
            update={"sliding_window": None, "window_first_layer": 0, "window_layer_freq": 1}
        )
        full = Context(model=full_model, gpu=ctx.gpu, cluster=ctx.cluster, training=ctx.training)
        for t in ref:
            if t.cand.chunks > 1:
                cc = class_costs(full, t.cand)
                cuts = [n for n in compositions(cc.num_layers, cc.chunks) if evaluate(cc, n).fits]
                if cuts and min(cuts, key=lambda n: evaluate(cc, n).objective_ns) != t.stage_layers:
                    moved += 1
                    break
    assert feasible >= 6 and piped >= 3 and moved >= 3, (feasible, piped, moved)


@pytest.mark.parametrize("seed", [0, 3])
def test_a_stage_sums_its_windowed_and_full_layers(seed: int) -> None:
    """Chunk times at every cut equal the layer-by-layer sum, each layer at its own kind's coefficient; the bounds
    stay ≤ every cut."""
    from planner.compose.blocks import block_sequence
    from planner.compose.cost import chunk_times, class_costs, evaluate
    from planner.compose.terms import kind_terms, shared_key
    from planner.search.bounds import class_bound, lean_bound, quick_bound
    from planner.search.bruteforce import compositions
    from planner.search.space import enumerate_candidates
    from planner.specs import SearchOptions

    ctx, pins = window_instance(seed)
    kinds, _ = block_sequence(ctx)
    order = [kinds[1] if ctx.model.is_window_layer(i) else kinds[0] for i in range(ctx.model.num_layers)]
    checked = cheaper = 0
    for cand in enumerate_candidates(ctx, pins, SearchOptions()):
        cc = class_costs(ctx, cand)
        evs = [evaluate(cc, n) for n in compositions(cc.num_layers, cc.chunks)]
        if evs:
            assert (
                lean_bound(ctx, cand) <= quick_bound(ctx, cand) <= class_bound(cc) <= min(e.objective_ns for e in evs)
            )
        if cc.chunks == 1 or cc.chunks > cc.num_layers or cand.cp > 1:
            continue
        assert cc.f_moe <= 0 and cc.b_moe <= 0  # a windowed layer is cheaper (or hidden behind ZeRO-3's gathers)
        cheaper += cc.f_moe < 0 and cc.b_moe < 0
        per = {k: kind_terms(ctx, shared_key(cand), k) for k in kinds}
        for n in compositions(cc.num_layers, cc.chunks):
            at, want_f, want_b = 0, [], []
            for c, size in enumerate(n):  # each layer at its own kind's coefficient, + the chunk's extras
                want_f.append(sum(per[k].fwd.layer for k in order[at : at + size]) + cc.f_extra[c])
                want_b.append(sum(per[k].bwd.layer for k in order[at : at + size]) + cc.b_extra[c])
                at += size
            assert chunk_times(cc, n) == (want_f, want_b), (cand, n)
            checked += 1
    assert checked > 10 and cheaper > 5


# ---------------------------------------------------------------------------------------------------------------
# Exports


def _estimate(model: object, stack: str, **parallel):
    import planner

    return planner.estimate_plan(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
            "training": {"global_batch_size": 64, "seq_len": 4096, "stack": stack},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 1, **parallel},
        }
    )


def _args(content: str) -> dict[str, str]:
    import shlex

    pairs = [shlex.split(line) for line in content.splitlines() if line.strip().startswith("--window")]
    return {p[0]: p[1] for p in pairs}


def test_megatron_export_sets_the_window_and_its_layers() -> None:
    from api.exporters import ExportOptions, export

    gpt = _args(export(_estimate("gpt-oss-20b", "megatron", ep=8, etp=1), "megatron", ExportOptions()).content)
    # HF's 128 keys (i − 127 … i) = TE/FlashAttention window_size (127, 0); windowed, full, …: N = 2
    assert gpt == {"--window-size": "127,0", "--window-attn-skip-freq": "2"}
    qwen = tiny(name="qwen-swa", sliding_window=1024, window_first_layer=4).model_dump()
    got = _args(export(_estimate(qwen, "megatron"), "megatron", ExportOptions()).content)
    assert got["--window-size"] == "1023,0"
    assert eval(got["--window-attn-skip-freq"]) == [0, 0, 0, 0, 1, 1]  # Megatron's moe_freq_type evaluates it
    every = tiny(name="mistral-swa", sliding_window=1024).model_dump()
    assert _args(export(_estimate(every, "megatron"), "megatron", ExportOptions()).content) == {
        "--window-size": "1023,0"
    }
    assert _args(export(_estimate(tiny().model_dump(), "megatron"), "megatron", ExportOptions()).content) == {}


def test_torchtitan_and_deepspeed_say_the_window_is_model_code() -> None:
    from api.exporters import ExportOptions, export

    swa = tiny(name="mistral-swa", sliding_window=1024).model_dump()
    titan = export(_estimate(swa, "torchtitan", zero_stage=3), "torchtitan", ExportOptions()).warnings
    assert any("sliding window" in w and "placeholder" in w for w in titan)
    # the catalog gpt-oss names torchtitan's own gpt_oss model, which applies the window itself: no warning
    gpt = export(
        _estimate("gpt-oss-20b", "torchtitan", ep=8, etp=1, zero_stage=3), "torchtitan", ExportOptions()
    ).warnings
    assert not any("sliding window" in w for w in gpt)
    ds = export(_estimate(swa, "deepspeed"), "deepspeed", ExportOptions()).warnings
    assert any("window_size=(1023, 0)" in w for w in ds)
    assert not any(
        "sliding window" in w for w in export(_estimate(tiny().model_dump(), "deepspeed"), "deepspeed").warnings
    )
