"""A mixture-of-experts plan's memory per stage itemises its routed experts (issue 23: the dashboard's memory chart
draws them): ``StageMemory.expert_weights_gib`` / ``expert_gradients_gib`` / ``expert_optimizer_gib``, checked here
against the experts counted by hand — (experts ÷ ep) × 3 · h · (f ÷ etp) parameters per MoE layer on a rank, its
MoE layers, bytes per parameter of the precision and of Adam's states, ZeRO's shard over the expert-data-parallel
ranks tp · dp ÷ (ep · etp) — and the stage's total unchanged by the itemisation. Dense plans are written as before
(no expert keys)."""

from __future__ import annotations

import pytest

from planner.api import estimate_plan
from planner.specs.catalog import get_model

GIB = 2**30


def _plan(model: str | dict, stack: str = "megatron", **parallel):
    return estimate_plan(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
            "training": {"global_batch_size": 256, "seq_len": 4096, "stack": stack},
            "parallel": {"micro_batch_size": 1, **parallel},
        }
    )


def _parts(stage) -> float:
    """A stage's itemised memory, summed."""
    return (
        stage.weights_gib
        + stage.gradients_gib
        + stage.optimizer_gib
        + stage.activations_gib
        + stage.buffers_gib
        + stage.reserve_gib
    )


@pytest.mark.parametrize(
    "parallel",
    [
        {"tp": 2, "pp": 2, "dp": 4, "ep": 4, "etp": 1, "sequence_parallel": True, "zero_stage": 1},
        {"tp": 2, "pp": 2, "dp": 4, "ep": 2, "etp": 2, "sequence_parallel": True, "zero_stage": 0},
        {"tp": 1, "pp": 2, "dp": 8, "ep": 8, "etp": 1, "zero_stage": 3, "stack": "torchtitan"},
        {"tp": 1, "pp": 1, "dp": 16, "ep": 4, "etp": 1, "zero_stage": 2, "stack": "torchtitan"},
    ],
)
def test_expert_memory_is_the_experts_counted_by_hand(parallel: dict) -> None:
    """(Megatron and torchtitan both keep 16-bit weights beside fp32 master states: ``"master"``; Megatron's gradients
    in its fp32 main_grad buffer.)"""
    plan = _plan("mixtral-8x7b", **parallel)
    m = get_model("mixtral-8x7b")
    assert m.moe is not None
    p = plan.parallel
    edp = p.tp * p.dp // (p.ep * p.etp)
    per_layer = (m.moe.num_experts // p.ep) * 3 * m.hidden_size * (m.moe.expert_ffn_hidden_size // p.etp)
    # bf16 weights and gradients, Adam's fp32 master + 2 moments; ZeRO-1 shards the 12 B, ZeRO-2 also the
    # gradients, ZeRO-3 everything, over expert-DP
    z = p.zero_stage
    weight_b = 2 / (edp if z == 3 else 1)
    grad_b = 2 / (edp if z >= 2 else 1)
    if parallel.get("stack") == "torchtitan" and p.pp > 1 and z >= 2:
        # FSDP2 under torch.distributed.pipelining keeps every micro-batch's gradients whole, accumulated in its fp32
        # reduce dtype, until the last backward (cost model 47: torch 2.13 pipelining/stage.py:844-847,
        # _fsdp_param.py:802-819)
        grad_b = 4
    if parallel.get("stack", "megatron") == "megatron":
        # Megatron DDP's main_grad buffer: fp32 under bf16 (accumulate_allreduce_grads_in_fp32), whole under the
        # distributed optimizer (cost model 51: core_v0.16.1 distributed_data_parallel.py:147, dist_optimizer.md)
        grad_b = 4
    opt_b = 12 / (edp if z >= 1 else 1)
    for stage, layers in zip(plan.estimate.memory_per_stage, p.stage_layers):  # one chunk per rank here
        n = per_layer * layers  # every Mixtral layer is MoE
        assert stage.expert_weights_gib == pytest.approx(n * weight_b / GIB, rel=1e-9)
        assert stage.expert_gradients_gib == pytest.approx(n * grad_b / GIB, rel=1e-9)
        assert stage.expert_optimizer_gib == pytest.approx(n * opt_b / GIB, rel=1e-9)
        assert stage.expert_weights_gib < stage.weights_gib and stage.expert_optimizer_gib < stage.optimizer_gib
        parts = _parts(stage)
        assert parts == pytest.approx(stage.total_gib, rel=1e-9)


def test_the_itemisation_moves_no_total_and_no_time() -> None:
    """Splitting the states by kind changes neither the stage's total nor the step: the same plan as the memory
    constraint counted it (the search and the estimate agree)."""
    plan = _plan("mixtral-8x7b", tp=2, pp=2, dp=4, ep=4, etp=1, sequence_parallel=True, zero_stage=1)
    e = plan.estimate
    assert e.peak_memory_gib == max(s.total_gib for s in e.memory_per_stage)
    non_expert = [s.weights_gib - s.expert_weights_gib for s in e.memory_per_stage]
    m = get_model("mixtral-8x7b")
    assert m.moe is not None
    # the non-expert weights: attention, norms, router and the embedding / LM head of the end stages, 2 B each
    h, layers = m.hidden_size, plan.parallel.stage_layers
    attn = (h * m.num_attention_heads * m.head_dim * 2 + 2 * h * m.num_kv_heads * m.head_dim) // plan.parallel.tp
    router = m.moe.num_experts * h
    for i, w in enumerate(non_expert):
        own = layers[i] * (attn + router + 2 * h) + (m.vocab_size * h // plan.parallel.tp)  # embedding or head
        assert w * GIB / 2 == pytest.approx(own, rel=0.01)


def test_dense_plans_carry_no_expert_fields() -> None:
    plan = _plan("llama3-8b", tp=2, pp=1, dp=8, zero_stage=1)
    for stage in plan.model_dump(mode="json")["estimate"]["memory_per_stage"]:
        assert not any(k.startswith("expert_") for k in stage)


def test_a_config_json_plan_through_the_cli_shows_ep_and_exports_to_torchtitans_own_model(tmp_path) -> None:
    """The new user's path (issue 23 "Done when"): ``meshplan plan --model config.json`` on Megatron prints EP in the
    plan table; the plan exports to Megatron with its experts and to torchtitan as torchtitan's own Qwen3-30B-A3B
    config (the config.json's model matched by shape), and to a launcher without ``--command`` (meshplan's runtime
    builds Qwen3's QK norm) with a warning that it was priced for Megatron."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "120"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "api.cli", *args]
        return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)

    config = root / "tests" / "data" / "hf_configs" / "qwen3-30b-a3b.json"
    args = ["--model", str(config), "--stack", "megatron", "--gpu", "h100-sxm5-80gb", "--nodes", "2"]
    args += ["--global-batch-size", "512", "--seq-len", "4096", "--top-k", "1"]
    args += ["--recompute", "full"]  # not Megatron-core's layernorm+moe_act, which torchtitan refuses (cost model 62)
    table = cli("plan", *args)
    assert table.returncode == 0, table.stderr
    out = cli("plan", *args, "--json")
    plan = json.loads(out.stdout)["plans"][0]
    ep = plan["parallel"]["ep"]
    assert ep > 1 and f" ep{ep} " in table.stdout
    (tmp_path / "plan.json").write_text(out.stdout)
    mega = cli("export", "--plan", str(tmp_path / "plan.json"), "--format", "megatron")
    assert mega.returncode == 0 and f"--expert-model-parallel-size {ep}" in mega.stdout
    assert "--kv-channels 128" in mega.stdout and "--qk-layernorm" in mega.stdout
    titan = cli("export", "--plan", str(tmp_path / "plan.json"), "--format", "torchtitan")
    assert titan.returncode == 0, titan.stderr
    assert "import qwen3_30b_a3b" in titan.stdout and f"p.expert_parallel_degree = {ep}" in titan.stdout
    slurm = cli("export", "--plan", str(tmp_path / "plan.json"), "--format", "slurm")
    # slurm without --command starts meshplan's runtime, which runs MoE and Qwen3's per-head QK norm: exported, with
    # the warning that the plan was priced for another stack
    assert slurm.returncode == 0 and "priced for the training stack 'megatron'" in slurm.stderr, slurm.stderr


def test_a_config_json_model_exports_as_torchtitans_own_config_by_shape() -> None:
    """A model sent as ``{"hf_config": ...}`` is named by the config (``hf-qwen3_moe``), not the catalog: the torchtitan
    exports still name torchtitan's Qwen3-30B-A3B (0.3.0 recipe, 0.2.2 flavor), matched by the model's shape."""
    import json
    from pathlib import Path

    from api.exporters import ExportOptions, export

    cfg = json.loads((Path(__file__).parent / "data" / "hf_configs" / "qwen3-30b-a3b.json").read_text())
    plan = _plan({"hf_config": cfg}, tp=1, pp=1, dp=16, ep=8, etp=1, zero_stage=1)
    assert plan.model.name == "hf-qwen3_moe"
    recipe = export(plan, "torchtitan", ExportOptions())
    assert "from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b" in recipe.content
    assert not any("placeholder" in w for w in recipe.warnings)
    toml = export(plan, "torchtitan-toml", ExportOptions())
    assert 'name = "qwen3"' in toml.content and 'flavor = "30B-A3B"' in toml.content


def test_rest_exports_a_moe_plan_to_megatron_and_the_launchers(tmp_path) -> None:
    """The service's export of a stored MoE plan: Megatron with the experts; a launcher without ``command`` starts
    meshplan's runtime, which runs Mixtral with EP; with ``command`` it carries MESHPLAN_EP to that program."""
    from fastapi.testclient import TestClient

    from tests.api_support import make_app

    body = {
        "model": "mixtral-8x7b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
        "training": {"global_batch_size": 256, "seq_len": 4096, "stack": "megatron"},
        "parallel": {"ep": 4, "etp": 1, "recompute": "full"},  # a mode meshplan's runtime runs (not layernorm+moe_act)
        "top_k": 1,
        "options": {"time_limit_s": 10, "num_workers": 1},
    }
    with TestClient(make_app(tmp_path), raise_server_exceptions=False) as client:
        stored = client.post("/v1/plans", json=body)
        assert stored.status_code == 201, stored.text
        pid = stored.json()["id"]
        mega = client.get(f"/v1/plans/{pid}/export/megatron")
        assert mega.status_code == 200 and "--expert-model-parallel-size 4" in mega.text
        # without ``command`` slurm starts meshplan's runtime, which runs Mixtral with EP (whole experts, etp 1)
        runtime = client.get(f"/v1/plans/{pid}/export/slurm")
        assert runtime.status_code == 200 and "-m runtime.train" in runtime.text, runtime.text[:500]
        mine = client.get(f"/v1/plans/{pid}/export/slurm", params={"command": "pretrain_gpt.py"})
        assert mine.status_code == 200 and "export MESHPLAN_EP=4" in mine.text and "pretrain_gpt.py" in mine.text


def test_gpt_oss_megatron_export_warns_that_its_clamped_swiglu_is_not_set() -> None:
    """gpt-oss's experts' clamped SwiGLU (``moe.swiglu_limit``) has no flag in the Megatron export: it says so rather
    than export plain SwiGLU experts silently; a MoE without it exports without that warning."""
    import planner
    from api.exporters import ExportOptions, export

    def warnings(model: str) -> list[str]:
        plan = planner.estimate_plan(
            {
                "model": model,
                "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
                "training": {"global_batch_size": 64, "seq_len": 4096, "stack": "megatron"},
                "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "etp": 1, "micro_batch_size": 1, "zero_stage": 1},
            }
        )
        return export(plan, "megatron", ExportOptions()).warnings

    assert any("clamped SwiGLU" in w and "7" in w for w in warnings("gpt-oss-20b"))
    assert not any("clamped SwiGLU" in w for w in warnings("olmoe-1b-7b"))


#: torchtitan, FSDP2 (ZeRO-3) under a pipeline: whole fp32 gradients, each chunk's from its first backward on (cost
#: model 51). (schedule, v, global batch → m = batch / 8, seq, per rank: the chunks whose backward has run at its
#: highest peak). By hand: 1F1B, m = 2, rank 0's peak is its two warm-up forwards (no gradient) against rank 1's
#: steady state; m = 32 both hold theirs; interleaved v = 4, m = 2 at seq 3072, rank 1's highest peak is right after
#: the first backward of its last chunk (7: one activation copy of 4 layers fewer, that chunk's gradients more).
WHOLE_GRADS = [
    ("1f1b", 1, 16, 4096, [(), (1,)]),
    ("1f1b", 1, 256, 4096, [(0,), (1,)]),
    ("interleaved-1f1b", 4, 16, 3072, [(), (7,)]),
]


@pytest.mark.parametrize(("schedule", "v", "batch", "seq", "done"), WHOLE_GRADS)
def test_expert_breakdown_holds_the_gradients_the_memory_model_priced(schedule, v, batch, seq, done) -> None:
    """The itemised stage sums to the peak the memory constraint priced (``memory.rank_memory``), its gradients are
    those of the chunks done at that peak (``memory.pending_grads``' complement), and the experts' among them are
    the done chunks' experts counted by hand in fp32 (4 B, whole over expert-DP 1)."""
    from planner.answer.request import complete_pins, context, parse_request
    from planner.compose.cost import class_costs
    from planner.compose.memory import pending_grads, rank_memory, reported_peak, with_reserve_gib

    parallel = {"tp": 1, "pp": 2, "dp": 8, "ep": 8, "etp": 1, "zero_stage": 3, "micro_batch_size": 1}
    parallel |= {"schedule": schedule, **({"virtual_stages": v} if v > 1 else {})}
    request = {
        "model": "mixtral-8x7b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
        "training": {"global_batch_size": batch, "seq_len": seq, "stack": "torchtitan"},
        "parallel": parallel,
    }
    plan = estimate_plan(request)
    req = parse_request(request)
    ctx = context(req)
    cand, n = complete_pins(ctx, req)
    cc = class_costs(ctx, cand)
    assert cc.done is not None and n == [32 // (2 * v)] * (2 * v)
    m = get_model("mixtral-8x7b")
    assert m.moe is not None
    per_layer = (m.moe.num_experts // 8) * 3 * m.hidden_size * m.moe.expert_ffn_hidden_size  # one expert a GPU
    for r, stage in enumerate(plan.estimate.memory_per_stage):
        assert reported_peak(cc, n, r)[2] == done[r]  # the hand's peak is the one reported
        layers = sum(n[ch] for ch in done[r])  # every Mixtral layer is MoE
        assert stage.expert_gradients_gib == pytest.approx(per_layer * layers * 4 / GIB, rel=1e-9)
        assert stage.expert_weights_gib == pytest.approx(per_layer * (32 // 2) * 2 / GIB, rel=1e-9)
        assert stage.expert_optimizer_gib == pytest.approx(per_layer * (32 // 2) * 12 / GIB, rel=1e-9)
        held = pending_grads(cc.shared, cc.cand, n, r, (), None) - pending_grads(
            cc.shared, cc.cand, n, r, done[r], None
        )
        assert stage.gradients_gib == pytest.approx(held / GIB, rel=1e-9, abs=1e-12)
        assert stage.gradients_gib >= stage.expert_gradients_gib
        parts = _parts(stage)
        assert parts == pytest.approx(stage.total_gib, rel=1e-12)
        assert stage.total_gib == pytest.approx(with_reserve_gib(rank_memory(cc, n, r)), rel=1e-12)
