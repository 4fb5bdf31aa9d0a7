"""DeepSeek-V3 (3 dense layers then 58 MoE, latent attention) and Llama 4 Maverick (dense and MoE layers
alternating) plan end to end from the CLI and REST on the megatron stack (issue 23): the cut counts the layers'
kinds, latent attention is priced at its own head widths and saved tensors, and what is not priced is refused
naming the field."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.api import estimate, plan
from planner.compose.blocks import block_sequence
from planner.pricing.gpu import local_attention_time
from planner.specs import PlanRequest
from planner.specs.catalog import get_model
from planner.specs.errors import MeshplanError
from planner.workload.activations import saved_activation_bytes
from planner.workload.context_parallel import kv_bytes
from planner.workload.ops import block_kinds
from tests.test_planner_cli import run

DSV3 = {
    "model": "deepseek-v3",
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 64, "gpus_per_node": 8},
    "training": {"global_batch_size": 1024, "seq_len": 4096, "stack": "megatron"},
}
#: The pins of the tests that plan DeepSeek-V3 (the search over every degree is bench/bench_plan.py's)
PINS = {"tp": 1, "pp": 16, "schedule": "1f1b"}


def test_deepseek_v3_layer_sequence() -> None:
    ctx = context(PlanRequest.model_validate(DSV3))
    kinds, prefix = block_sequence(ctx)
    assert kinds == ("transformer_block", "moe_block") and prefix is not None
    assert (
        prefix[3] == 0
        and prefix[-1] == 58
        and block_kinds(ctx.model)[:4] == ("transformer_block",) * 3 + ("moe_block",)
    )


def test_latent_attention_is_priced_at_its_head_widths() -> None:
    """Q·Kᵀ at the query/key head width (nope 128 + rope 64 = 192) and P·V at the value head width (128): the core's
    FLOPs are 2·b·s²·(192 + 128)·a/t; its flash time grows with them as a 160-wide head's would (both above the
    table's 128); the K/V a CP rank sends are a/t·(192 + 128) per token, not 2·(h/a)."""
    ctx = context(PlanRequest.model_validate(DSV3))
    mla = ctx.model.mla
    assert mla is not None and (mla.qk_head_dim, mla.v_head_dim) == (192, 128)
    mha = ctx.model.model_copy(update={"mla": None, "moe": None, "num_kv_heads": 128, "attention_head_dim": 160})
    twin = context(PlanRequest.model_validate({**DSV3, "model": mha.model_dump(), "training": DSV3["training"]}))
    a, b = local_attention_time(ctx, 1, 8), local_attention_time(twin, 1, 8)
    assert a == pytest.approx(b, rel=1e-12)  # the same FLOPs (2·(192 + 128) = 4·160) at the same rate
    assert kv_bytes(ctx.model, 1, 4096, 8, 2) == 4096 * 16 * (192 + 128) * 2


def test_latent_attention_saves_its_own_tensors() -> None:
    """Megatron-core's MLASelfAttention under Transformer Engine keeps, per block at b = 1, s = 4096, tp = 8 with SP:
    the down projections' input (s/8·h), the two latents' norm input and output and 1/rms, the rotary key, q and k
    at 192 and v at 128 per local head, the output at 128, the fp32 log-sum-exp — written out tensor by tensor."""
    m = get_model("deepseek-v3")
    s, tp, e, h = 4096, 8, 2, 7168
    attention = (
        s / tp * h * e  # down projections' input
        + s * (2 * (1536 + 512) * e + 2 * 4)  # q and kv latents: norm input + output, fp32 1/rms each
        + s * 64 * e  # rotary key input
        + s * 16 * (192 + 192 + 128) * e  # q, k, v
        + s * 16 * 128 * e  # attention output
        + s * 16 * 4  # log-sum-exp
    )
    norms = 2 * s / tp * (h * e + 4)
    mlp = s / tp * h * e + 3 * s * 18432 / tp * e  # the dense layer's MLP input and fc1 / activation outputs
    from planner.specs.stacks import STACKS

    got = saved_activation_bytes(m, "transformer_block", 1, s, tp, True, "bf16", STACKS["megatron"])
    assert got.none == int(attention + norms + mlp)
    assert got.selective == int(attention + norms + mlp - s * 16 * 4)


def test_deepseek_v3_plans_from_the_cli() -> None:
    args = ["--model", "deepseek-v3", "--stack", "megatron", "--gpu", "h100-sxm5-80gb", "--nodes", "64"]
    args += ["--gpus-per-node", "8", "--global-batch-size", "1024", "--seq-len", "4096", "--tp", "1", "--pp", "16"]
    out = run("plan", *args, "--schedule", "1f1b", "--time-limit-s", "100", "--json")
    assert out.returncode == 0, out.stderr
    from planner.specs import PlanResponse

    resp = PlanResponse.model_validate_json(out.stdout)
    best = resp.plans[0]
    assert resp.solver.status == "OPTIMAL"
    assert sum(best.parallel.stage_layers) == 61 and best.parallel.ep > 1  # type: ignore[arg-type]
    assert best.estimate.breakdown.ep_comm_s > 0 and best.estimate.fits


def test_deepseek_v3_and_maverick_plan_over_rest(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from tests.api_support import make_app

    maverick = {
        "model": "llama4-maverick",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 16, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": 8192, "stack": "megatron"},
        "parallel": {"tp": 8, "pp": 8, "sequence_parallel": True, "schedule": "1f1b"},
    }
    # a loaded test machine: the solver's wall-time limit raised (the service caps it at max_solver_time_s)
    with TestClient(make_app(tmp_path, max_solver_time_s=300), raise_server_exceptions=False) as client:
        for body in ({**DSV3, "parallel": PINS}, maverick):
            r = client.post("/v1/plans", json={**body, "options": {"time_limit_s": 300}})
            assert r.status_code == 201, r.text
            resp = r.json()["response"]
            assert resp["solver"]["status"] == "OPTIMAL", resp["solver"]
            best = resp["plans"][0]
            n = get_model(body["model"]).num_layers  # type: ignore[arg-type]
            assert sum(best["parallel"]["stage_layers"]) == n and best["estimate"]["fits"]


def test_maverick_stages_hold_layers_of_both_kinds() -> None:
    """Maverick's 48 layers alternate (every second one MoE): each of its stages in the plan holds a mix, and the
    estimate at a cut is the search's (re-estimated from the plan)."""
    from planner.answer.request import replay_request
    from planner.api import estimate_plan

    body = {
        "model": "llama4-maverick",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 16, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": 8192, "stack": "megatron"},
        "parallel": {"tp": 8, "pp": 8, "sequence_parallel": True, "schedule": "1f1b"},
    }
    best = plan(body).plans[0]
    again = estimate_plan(replay_request(best))
    assert again.estimate.step_time_s == best.estimate.step_time_s
    kinds = block_kinds(best.model)
    at = 0
    for size in best.parallel.stage_layers:  # type: ignore[union-attr]
        assert len(set(kinds[at : at + size])) == (2 if size > 1 else 1)
        at += size


@pytest.mark.parametrize("stack", ["torchtitan", "deepspeed"])
def test_latent_attention_off_megatron_is_refused_naming_the_stack(stack: str) -> None:
    """Priced on megatron (Transformer Engine's tensors) and meshplan (the bundled runtime's LatentAttention:
    tests/test_runtime_mla.py plans a tiny DeepSeek-V3 there); refused elsewhere."""
    with pytest.raises(MeshplanError) as err:
        estimate({**DSV3, "training": {**DSV3["training"], "stack": stack}, "parallel": PINS})
    assert err.value.field == "training.stack"
    assert "megatron" in err.value.fix or "megatron" in err.value.message
