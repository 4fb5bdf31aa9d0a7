"""Megatron-core's selective recomputation by module (cost model 62; ``parallel.recompute = "layernorm+moe_act"``,
``planner.compose.recompute_modules``) against hand counts written here from NVIDIA/Megatron-LM core_v0.16.1:
``transformer_layer.py:382-438`` (the norms recomputed where they are modules of their own), ``gpt_layer_specs.py:248,
265, 279, 291`` (TE spec: the input norm fused into ``linear_qkv`` but for MLA, the pre-MLP norm its own module on
MoE layers only), ``moe/experts.py:588-591, 738-750`` (the experts' activation checkpointed on fc1's output, fc2's
input discarded), ``tensor_parallel/random.py:621-742`` (``CheckpointWithoutOutput``: inputs saved, the output's
storage freed); the stack pins, the exports and the search's enumeration."""

from __future__ import annotations

import math

import pytest

from api.exporters import export
from api.exporters.options import ExportOptions
from planner.answer.request import context
from planner.api import estimate_plan
from planner.compose.layer_group import layer_group
from planner.compose.recompute_modules import MODULES, module_recompute, searched_recompute
from planner.pricing.device import FRAGMENTATION
from planner.pricing.gpu import hbm_efficiency
from planner.specs import PlanRequest
from planner.specs.catalog import get_model
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS
from planner.workload.ops import MOE_BLOCK

SEQ = 4096


def _req(model: str, stack: str = "megatron", tp: int = 1, ep: int = 8, etp: int = 1, **training) -> dict:
    parallel = {"tp": tp, "pp": 4, "ep": ep, "etp": etp, "micro_batch_size": 1, "zero_stage": 1, "recompute": "none"}
    if tp > 1:
        parallel["sequence_parallel"] = True
    return {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": SEQ, "stack": stack, **training},
        "parallel": parallel,
    }


def _ctx(model: str, stack: str = "megatron", tp: int = 1, ep: int = 8, etp: int = 1, **training):
    return context(PlanRequest.model_validate(_req(model, stack, tp, ep, etp, **training)))


def _hbm(ctx, nbytes: float, kernels: int = 1) -> float:
    """One memory-bound kernel set by hand: bytes at the GPU's HBM rate × the achieved efficiency at its size."""
    per = nbytes / kernels
    return kernels * per / (ctx.gpu.hbm_bandwidth_GBps * 1e9 * hbm_efficiency(per))


# (model, mbs, tp (SP on when > 1), ep, etp, fp8 recipe or None)
CASES = [
    ("gpt-oss-120b", 1, 1, 8, 1, None),  # the Megatron-Bridge recipe's layout
    ("gpt-oss-120b", 2, 2, 8, 2, None),  # SP-sharded norm; experts gathered over ETP 2, f / 2
    ("gpt-oss-120b", 1, 2, 4, 1, "current"),  # FP8: fc2's input was saved at 1 byte
    ("mixtral-8x22b", 1, 2, 4, 1, None),  # no clamp: only fc2's input is dropped
    ("qwen3-30b-a3b", 1, 1, 8, 1, None),
    ("deepseek-v3", 1, 1, 8, 1, None),  # MLA: the input norm is its own module too
]


@pytest.mark.parametrize(("name", "mbs", "tp", "ep", "etp", "fp8"), CASES)
def test_moe_block_hand_count(name: str, mbs: int, tp: int, ep: int, etp: int, fp8: str | None) -> None:
    """Per MoE block and micro-batch on one rank, bf16 activations (e = 2): the norms' outputs dropped — the pre-MLP
    norm's [T/sp, h] (as the planner's block counts it, ``te_block_saved_terms``' ``mlp_input``: 1 byte under FP8)
    and with MLA the input norm's — and per routed row fc2's input (f/etp at e, 1 byte
    under FP8) plus, with gpt-oss's clamp, the clamps' saved copy of fc1's output (2f/etp at e); the checkpoint keeps
    fc1's output, which was saved already. Backward reruns each norm (read + write [T/sp, h]: 2e per element), the
    fused activation (read 2f, write f: 3e per FFN element of every local routed row) and the clamp's forward (gate
    2f·e, up 2f·e, cat 4f·e a row, one kernel each), at the achieved HBM rate × the memory residual."""
    training = {"precision": "fp8", "fp8_recipe": fp8} if fp8 else {}
    ctx = _ctx(name, tp=tp, ep=ep, etp=etp, **training)
    m = get_model(name)
    x = m.moe
    e, h = 2, m.hidden_size
    T = mbs * SEQ // tp  # SP on with tp > 1
    T_in = T * etp  # rows gathered over ETP
    f = x.expert_ffn_hidden_size // etp
    routed = T_in * x.top_k  # dropless, balanced
    local_rows = math.ceil(T_in * x.top_k * ep / x.num_experts) * (x.num_experts // ep)
    norms = 2 if m.mla is not None else 1
    clamp = x.swiglu_limit is not None
    q = 1 if fp8 else e
    # the pre-MLP norm's output as the planner's block counts it: the TE terms' ``mlp_input`` (1 byte under FP8, a
    # dense LayerNormMLP's quantized input, kept for the MoE block); MLA's input norm output at e
    want_norm = T * h * q + (norms - 1) * T * h * e
    want_act = routed * (q * f + (2 * f * e if clamp else 0))
    t = norms * _hbm(ctx, 2 * e * T * h) + _hbm(ctx, 3 * e * local_rows * f)
    if clamp:
        t += _hbm(ctx, 2 * f * e * local_rows) * 2 + _hbm(ctx, 4 * f * e * local_rows)
    got = module_recompute(ctx, mbs, tp, tp > 1, ep, etp, moe=True)
    assert got.norm_bytes == pytest.approx(want_norm, rel=1e-12)
    assert got.act_bytes == pytest.approx(want_act, rel=1e-12)
    assert got.saved_less == pytest.approx(want_norm + want_act, rel=1e-12)
    assert got.bwd_more == pytest.approx(ctx.residuals.memory_scale * t, rel=1e-12)


@pytest.mark.parametrize(("name", "norms"), [("llama3-8b", 0), ("deepseek-v3", 1), ("gpt-oss-120b", 0)])
def test_dense_block_hand_count(name: str, norms: int) -> None:
    """A dense block under the TE spec: the input norm fused into ``linear_qkv`` and the pre-MLP norm into
    ``linear_fc1`` (IdentityOp modules: nothing recomputed) — but MLA's input norm, its own module (one [T, h])."""
    ctx = _ctx(name, ep=8 if get_model(name).moe else 1)
    h = get_model(name).hidden_size
    got = module_recompute(ctx, 1, 1, False, 1, 1, moe=False)
    assert (got.norm_bytes, got.act_bytes) == (norms * SEQ * h * 2, 0.0)
    assert got.bwd_more == pytest.approx(ctx.residuals.memory_scale * norms * _hbm(ctx, 4 * SEQ * h), rel=1e-12)


@pytest.mark.parametrize(("name", "tp", "ep", "etp"), [("gpt-oss-120b", 1, 8, 1), ("mixtral-8x22b", 2, 4, 2)])
def test_layer_group_takes_the_terms(name: str, tp: int, ep: int, etp: int) -> None:
    """The MoE block's layer group under the mode is recompute none's less the dropped bytes (saved; held again while
    the layer's backward reruns them: ``recompute_tmp``), its backward longer by the rerun, its forward the same."""
    ctx = _ctx(name, tp=tp, ep=ep, etp=etp)
    sp = tp > 1
    none = layer_group(ctx, 1, tp, sp, "none", False, ep, etp, MOE_BLOCK)
    mod = layer_group(ctx, 1, tp, sp, MODULES, False, ep, etp, MOE_BLOCK)
    mr = module_recompute(ctx, 1, tp, sp, ep, etp, moe=True)
    assert none.acts.layer - mod.acts.layer == pytest.approx(mr.saved_less, abs=1)
    assert (none.recompute_tmp, mod.recompute_tmp) == (0, int(mr.saved_less))
    assert mod.work_f == none.work_f
    assert mod.work_b[0] - none.work_b[0] == pytest.approx(mr.bwd_more, rel=1e-9)


def test_gpt_oss_recipe_estimate() -> None:
    """The Megatron-Bridge 26.x gpt-oss-120b layout on 64 H100 (PP 4, 1F1B, 9 layers a stage): the peak (the first
    stage, pp = 4 micro-batches in flight) drops by 4 × 9 layers' dropped bytes less the one layer's rerun held during
    its backward, × the allocator's fragmentation allowance; the 1F1B step (m + pp − 1 = 32 + 3 stage slots, each
    stage's 9 layers) by the reruns of 35 × 9 layers."""
    base = _req("gpt-oss-120b")
    none = estimate_plan(base).estimate
    mods = estimate_plan({**base, "parallel": {**base["parallel"], "recompute": MODULES}}).estimate
    ctx = _ctx("gpt-oss-120b")
    mr = module_recompute(ctx, 1, 1, False, 8, 1, moe=True)
    drop = (none.peak_memory_gib - mods.peak_memory_gib) * 2**30
    assert drop == pytest.approx((4 * 9 - 1) * mr.saved_less * (1 + FRAGMENTATION), rel=1e-9)
    more = mods.step_time_s - none.step_time_s
    assert more == pytest.approx((512 // 16 + 4 - 1) * 9 * mr.bwd_more, rel=1e-6)  # 1F1B: (m + pp − 1) slots


@pytest.mark.parametrize(
    ("stack", "offers"),
    [
        ("megatron", True),  # Megatron-core 0.16.1: --recompute-modules since 3b141a24 (core_v0.13.0)
        ("nemo-2407", False),  # Megatron-core 338af514 (2024-07-23): before it
        ("megatron-2022", False),
        ("torchtitan", False),
        ("deepspeed", False),
        ("meshplan", False),
    ],
)
def test_stack_pins(stack: str, offers: bool) -> None:
    """Only the stacks whose Megatron-core has ``--recompute-modules`` offer the mode; a pin elsewhere is the
    stack rule's error naming parallel.recompute."""
    assert (MODULES in STACKS[stack].recompute) is offers
    req = {
        "model": {
            "megatron-2022": "gpt3-1.3b",
            "deepspeed": "llama3-8b",
            "meshplan": "llama3-8b",
            "nemo-2407": "qwen3-30b-a3b",  # a mixture of experts its Megatron-core builds (no attention sinks)
        }.get(stack, "gpt-oss-20b"),
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {
            "global_batch_size": 64,
            "seq_len": 2048,
            "stack": stack,
            "precision": "fp16" if stack == "megatron-2022" else "bf16",
        },
        "parallel": {"recompute": MODULES},
    }
    if offers:
        assert estimate_plan(req).parallel.recompute == MODULES
    else:
        with pytest.raises(MeshplanError) as err:
            estimate_plan(req)
        assert err.value.field == "parallel.recompute" and "does not run recompute 'layernorm+moe_act'" in str(
            err.value
        )


def test_delayed_fp8_refused() -> None:
    """Megatron-core refuses both modules under delayed FP8 scaling (transformer_config.py:1241-1247)."""
    req = _req("gpt-oss-120b", precision="fp8", fp8_recipe="delayed")
    req["parallel"]["recompute"] = MODULES
    with pytest.raises(MeshplanError) as err:
        estimate_plan(req)
    assert err.value.field == "parallel.recompute" and "delayed FP8" in str(err.value)
    assert MODULES not in searched_recompute(_ctx("gpt-oss-120b", precision="fp8", fp8_recipe="delayed"), ("none",))


def test_search_enumerates_it_where_it_differs() -> None:
    """The free search tries the mode on the megatron stack for a mixture of experts or latent attention, not on a
    dense model with multi-head attention (where it recomputes nothing), nor on a stack without it."""
    assert searched_recompute(_ctx("gpt-oss-120b"), ("none",)) == ("none", MODULES)
    assert searched_recompute(_ctx("deepseek-v3"), ("none",)) == ("none", MODULES)
    assert searched_recompute(_ctx("llama3-8b", ep=1), ("none",)) == ("none",)
    assert searched_recompute(_ctx("qwen3-30b-a3b"), ("none",)) == ("none", MODULES)
    assert searched_recompute(_ctx("qwen3-30b-a3b", stack="nemo-2407"), ("none",)) == ("none",)


def _plan(recompute: str):
    req = _req("gpt-oss-120b")
    req["parallel"]["recompute"] = recompute
    return estimate_plan(req)


def test_exports() -> None:
    """Megatron-LM gets ``--recompute-granularity selective --recompute-modules layernorm moe_act`` (the refusals:
    ``test_export_refused``); without the mode neither flag."""
    plan = _plan(MODULES)
    text = export(plan, "megatron", ExportOptions()).content
    words = text.replace("\\\n", " ").split()
    i = words.index("--recompute-granularity")
    assert words[i : i + 5] == ["--recompute-granularity", "selective", "--recompute-modules", "layernorm", "moe_act"]
    none = export(_plan("none"), "megatron", ExportOptions()).content
    assert "--recompute-modules" not in none and "--recompute-granularity" not in none


#: A Mixtral plan priced for the megatron stack with the mode (the consumer case ``moe-mixtral-pp4-layernorm-moe-act``
#: of tests/test_consumers.py), every parallel setting pinned.
_MIXTRAL = {
    "model": "mixtral-8x7b",
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8},
    "training": {"global_batch_size": 256, "seq_len": 4096, "stack": "megatron"},
    "parallel": {
        **{"tp": 2, "pp": 4, "dp": 4, "ep": 4, "etp": 1, "micro_batch_size": 1, "schedule": "1f1b"},
        **{"zero_stage": 1, "recompute": MODULES, "sequence_parallel": True},
    },
}
_NONE_SELECTIVE_FULL = "none, selective or full"
#: export format → what its refusal of the mode says besides the field: the target, and what the training stack it runs
#: recomputes instead — torchtitan's ActivationCheckpoint modes none / selective / full; DeepSpeed's
#: activation_checkpointing of whole layers (selective exports with a warning: the model must wrap its attention core
#: itself, so the deepspeed stack prices none or full); meshplan's runtime/parallelize.py apply_recompute; the launchers
#: start meshplan's runtime (their fix adds --command). Megatron-LM 2022 refuses it in its own words.
REFUSALS = [
    ("torchtitan", ["torchtitan 0.3.0 has no recomputation by module", f"'torchtitan' training stack recomputes {_NONE_SELECTIVE_FULL}", f"re-plan with parallel.recompute {_NONE_SELECTIVE_FULL}, or export to megatron"]),
    ("torchtitan-toml", ["torchtitan 0.2.2 has no recomputation by module", f"'torchtitan' training stack recomputes {_NONE_SELECTIVE_FULL}"]),
    ("deepspeed", ["DeepSpeed has no recomputation by module", "'deepspeed' training stack recomputes none or full", "re-plan with parallel.recompute none or full, or export to megatron"]),
    ("meshplan", ["meshplan's runtime has no recomputation by module", f"'meshplan' training stack recomputes {_NONE_SELECTIVE_FULL}"]),
    ("slurm", ["meshplan's runtime has no recomputation by module", "or give --command to start your own program"]),
    ("kubeflow-trainjob", ["meshplan's runtime has no recomputation by module", "or give --command"]),
    ("megatron-2022", ["Megatron-LM 52e636888c (2022) recomputes by --recompute-granularity only", "not 'layernorm+moe_act'"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """The plan stored by the service (POST /v1/plans), its client, and the response saved for the CLI."""
    import json

    from fastapi.testclient import TestClient

    from tests.api_support import make_app

    body = {**_MIXTRAL, "top_k": 1, "options": {"time_limit_s": 10, "num_workers": 1}}
    tmp = tmp_path_factory.mktemp("store")
    with TestClient(make_app(tmp), raise_server_exceptions=False) as client:
        r = client.post("/v1/plans", json=body)
        assert r.status_code in (200, 201), r.text
        assert r.json()["response"]["plans"][0]["parallel"]["recompute"] == MODULES
        path = tmp / "plan.json"
        path.write_text(json.dumps(r.json()["response"]))
        yield client, r.json()["id"], path


@pytest.mark.parametrize(("fmt", "says"), REFUSALS, ids=[fmt for fmt, _ in REFUSALS])
def test_export_refused(fmt: str, says: list[str], stored) -> None:
    """Each target without recomputation by module refuses the plan naming plan.parallel.recompute, the target, the
    stack it runs and what that stack offers: the library (``MeshplanError``), the service (422 problem, the error's
    field) and the CLI (exit 2, the message on stderr, no traceback) alike."""
    import subprocess
    import sys
    from pathlib import Path

    client, plan_id, path = stored
    with pytest.raises(MeshplanError) as err:
        export(estimate_plan(_MIXTRAL), fmt, ExportOptions())
    assert err.value.field == "plan.parallel.recompute"
    r = client.get(f"/v1/plans/{plan_id}/export/{fmt}")
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == ["plan.parallel.recompute"], r.text
    root = Path(__file__).resolve().parents[1]
    cli = subprocess.run(
        [sys.executable, "-m", "api.cli", "export", "--plan", str(path), "--format", fmt],
        capture_output=True, text=True, cwd=root, timeout=120,
    )  # fmt: skip
    flat = " ".join(cli.stderr.split())
    assert cli.returncode == 2 and "plan.parallel.recompute" in flat and "Traceback" not in flat, cli.stderr
    for words in says:
        assert words in str(err.value) and words in r.json()["detail"] and words in flat, (words, flat)
    assert cli.stdout == ""


def test_megatron_export_of_the_stored_plan(stored) -> None:
    """The service and the CLI export the same plan to megatron: the two recompute flags."""
    client, plan_id, _ = stored
    r = client.get(f"/v1/plans/{plan_id}/export/megatron")
    assert r.status_code == 200 and "--recompute-granularity selective" in r.text, r.text[:500]
    assert "--recompute-modules layernorm moe_act" in " ".join(r.text.replace("\\\n", " ").split())


@pytest.mark.parametrize("name", ["gpt-oss-120b", "deepseek-v3"])
def test_moe_floor_stays_below(name: str) -> None:
    """The search's MoE floor under the mode (the dense parts and the experts' floor shared with none's: they read
    the recomputation only as full or selective) stays at or below the block's priced layer group."""
    from planner.compose.layer_group import moe_floor

    ctx = _ctx(name)
    for tp, sp, ep, etp in [(1, False, 8, 1), (2, True, 4, 1), (2, True, 8, 2)]:
        f, b = moe_floor(ctx, 1, tp, sp, MODULES, False, ep, etp)
        lg = layer_group(ctx, 1, tp, sp, MODULES, False, ep, etp, MOE_BLOCK)
        assert f <= lg.fwd.layer and b <= lg.bwd.layer
        none = layer_group(ctx, 1, tp, sp, "none", False, ep, etp, MOE_BLOCK)
        assert (f, b) <= (lg.fwd.layer, lg.bwd.layer) and lg.bwd.layer > none.bwd.layer


def test_rest_accepts_and_refuses(tmp_path) -> None:
    """POST /v1/estimates takes the mode through the request schema (pydantic ``Recompute``) on the megatron stack,
    and answers a stack without it with a 4xx naming parallel.recompute."""
    from fastapi.testclient import TestClient

    from tests.api_support import make_app

    with TestClient(make_app(tmp_path), raise_server_exceptions=False) as client:
        body = _req("gpt-oss-20b")
        body["parallel"]["recompute"] = MODULES
        r = client.post("/v1/estimates", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["parallel"]["recompute"] == MODULES
        body["model"] = "qwen3-30b-a3b"  # nemo-2407 builds no gpt-oss (attention sinks)
        body["training"]["stack"] = "nemo-2407"  # Megatron-core 338af514: no --recompute-modules
        r = client.post("/v1/estimates", json=body)
        assert 400 <= r.status_code < 500 and "parallel.recompute" in r.text, r.text
        body["parallel"]["recompute"] = "layernorm"  # not a value of the schema
        r = client.post("/v1/estimates", json=body)
        assert r.status_code == 422 and "parallel.recompute" in r.text, r.text
