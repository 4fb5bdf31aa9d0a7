"""The Plan is small and self-contained: the mesh is its shape (groups are derived), it records the
cost inputs and the cost-model version that priced it, and ``planner.estimate``, the trace and a
re-read of an older plan file all reproduce its numbers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import planner
from planner.answer.io import load_plan
from planner.answer.request import replay_request
from planner.answer.trace import chrome_trace
from planner.specs import SCHEMA_VERSION, CostInputs, LinkFit, NetworkProfile, Plan, PlanResponse
from planner.specs.catalog import get_model
from planner.specs.errors import MeshplanError
from planner.specs.layout import mesh_groups, mesh_layout
from planner.specs.version import COST_MODEL_VERSION
from planner.workload.analytic import analytic_profile


def body(model="llama3-8b", gpu="h100-sxm5-80gb", nodes=1, gpn=8, gbs=64, seq=4096, **parallel) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
        "training": {"global_batch_size": gbs, "seq_len": seq},
        "parallel": parallel,
        "options": {"time_limit_s": 20, "num_workers": 1},
    }


def slow_network(world_size: int, nodes: int) -> NetworkProfile:
    """A measured-looking profile of a slow cluster: every collective 1 ms + 1 ns/byte (≈ 1 GB/s)."""
    links = [
        LinkFit(link=link, collective=coll, group_size=2, alpha_s=1e-3, beta_s_per_byte=1e-9)
        for link in ("intra_node", "inter_node")
        for coll in ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
    ]
    return NetworkProfile(backend="nccl", device="h100", world_size=world_size, nodes=nodes, links=links)


def trace_span_s(trace: dict) -> float:
    blocks = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    return max(e["ts"] + e["dur"] for e in blocks) / 1e6


# (request pins, nodes): a pipeline inside a node and one across nodes.
TRACE_CASES = [
    ({"pp": 4, "tp": 2}, 1),
    ({"pp": 2, "tp": 4, "zero_stage": 1}, 2),
]


@pytest.mark.parametrize("pins,nodes", TRACE_CASES)
def test_trace_of_a_plan_priced_with_a_network_profile_spans_its_step_time(pins, nodes):
    """The trace re-simulates the plan with the cost inputs that produced it (it rebuilt the request
    without the network profile, and drew a schedule far shorter than the plan's own step time)."""
    req = {**body(nodes=nodes, **pins), "network": slow_network(8 * nodes, nodes).model_dump(), "top_k": 1}
    plan = planner.plan(req).plans[0]
    fast = planner.estimate({**body(nodes=nodes), "parallel": plan.parallel.model_dump()})
    assert plan.estimate.step_time_s > 2 * fast.step_time_s  # the profile matters for this plan
    trace = chrome_trace(plan)
    assert trace_span_s(trace) == pytest.approx(plan.estimate.step_time_s, rel=1e-9)
    assert trace["metadata"]["step_time_s"] == pytest.approx(plan.estimate.step_time_s, rel=1e-12)


# ------------------------------------------------------------------------------------------------
# Small: the mesh is its shape


def test_a_405b_plan_on_16384_gpus_is_small():
    """`meshplan plan --model llama3-405b --gpu h100-sxm5-80gb --nodes 2048 --gpus-per-node 8
    --global-batch-size 2048 --seq-len 8192 --json` wrote 3.4 MB (three plans of ~1.1 MB, nearly all
    rank-group lists); a plan is now a few KB, and its groups are derived from the mesh shape."""
    req = {
        "model": "llama3-405b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2048, "gpus_per_node": 8},
        "training": {"global_batch_size": 2048, "seq_len": 8192},
    }
    response = planner.plan(req)
    assert response.plans and response.plans[0].estimate.gpus_used == 16384
    for plan in response.plans:
        assert len(plan.model_dump_json(indent=2)) < 20_000  # as `meshplan plan --json` indents it
        shape = dict(zip(plan.mesh.dim_names, plan.mesh.shape))
        groups = {d: mesh_groups(plan.mesh, d) for d in shape}
        assert all(len(groups[d]) * shape[d] == 16384 and all(len(g) == shape[d] for g in groups[d]) for d in shape)
    assert len(response.model_dump_json(indent=2)) < 3 * 20_000
    # One GPU field (the full spec, in the cluster), one memory-per-stage field.
    dumped = response.plans[0].model_dump()
    assert "gpu" not in dumped and dumped["cluster"]["gpu"]["id"] == "h100-sxm5-80gb"
    assert (
        "memory_per_stage_gib" not in dumped["estimate"]
        and len(dumped["estimate"]["memory_per_stage"]) == dumped["parallel"]["pp"]
    )


# ------------------------------------------------------------------------------------------------
# Reproducible: the cost inputs and the cost-model version travel with the plan


def test_estimate_of_a_plan_reproduces_it_with_its_profile_and_network():
    model = get_model("tiny-gpt")
    prof = analytic_profile(model, micro_batch_sizes=[1, 2, 4], seq_len=128, tps=[1, 2], precision="bf16")
    for lp in prof.layers:  # "measured": slower than the analytic rates
        lp.fwd_time_s, lp.bwd_time_s = 3e-3 * lp.micro_batch_size / lp.tp, 6e-3 * lp.micro_batch_size / lp.tp
    req = {
        # cp = 1: on 4 GPUs every CP degree is searched (``cp_degrees.CP_FULL_GPUS``) and the best plan here is TP1 × CP2,
        # whose ring exchange (8.1 ms) costs the same with and without these inputs: the last check reads the inputs' share
        **body("tiny-gpt", nodes=2, gpn=2, gbs=16, seq=128, cp=1),
        "profile": prof.model_dump(),
        "network": slow_network(4, 2).model_dump(),
        "top_k": 2,
    }
    response = planner.plan(req)
    assert response.cost_model_version == COST_MODEL_VERSION
    for plan in response.plans:
        assert plan.inputs == CostInputs(
            cost_model_version=COST_MODEL_VERSION, profile=prof, network=slow_network(4, 2)
        )
        # Through a file: the plan alone is enough.
        again = planner.estimate_plan(replay_request(Plan.model_validate_json(plan.model_dump_json())))
        assert again.estimate == plan.estimate
        assert trace_span_s(chrome_trace(plan)) == pytest.approx(plan.estimate.step_time_s, rel=1e-9)
        without = planner.estimate_plan(
            replay_request(plan.model_copy(update={"inputs": CostInputs(cost_model_version=1)}))
        )
        assert without.estimate.step_time_s < plan.estimate.step_time_s / 2  # the inputs are what priced it


#: sha256 (first 16 hex digits) of the reference estimates below, per cost-model version. A change that
#: moves any of these numbers must bump planner.specs.version.COST_MODEL_VERSION and add its fingerprint here
#: (stored answers of the old version are then re-solved instead of served).
FINGERPRINTS = {
    1: "39f4d473ec81accb",
    2: "39f4d473ec81accb",  # 2 changed the ranking only
    3: "3b80216528bbe5ce",  # headroom (fields, fits), ZeRO-3 breakdown
    4: "ec211d1c323f9d6a",  # per-op compute, training stacks
    5: "05ba4e7493449e39",  # collectives by size, overlap slowdown, lean runtime, torchtitan, residuals
    6: "9bb46020d67bf4b7",  # the bundled runtime's FSDP2 mixed-precision states and loss (meshplan stack)
    7: "05469663d6878f93",  # a host's step-end collectives (SP norms' gradients once per step, the clip's); host references added
    8: "44543f1f6496d10d",  # a host's pipeline-schedule actions (the pp2 host reference)
    9: "44543f1f6496d10d",  # 9 changed the search space only (what the stack runs); GPT-3 reference untied
    10: "4f9a6571a166a0ea",  # the collectives each stack issues, on every device; SP's AG/RS as separate calls
    11: "4f9a6571a166a0ea",  # 11 (FP8) leaves every bf16 reference as it was; FP8: tests/test_fp8.py
    12: "4f9a6571a166a0ea",  # 12 (Megatron 1F1B's blocking sends): no reference runs it; tests/test_pipeline_p2p.py
    13: "9a393195164df926",  # DP gradients on the wire in the stack's reduce dtype (fp32 under FSDP2, Megatron bf16)
    14: "c1288079e9ca2e71",  # context parallelism: the breakdown's cp_comm_s (0 on the cp = 1 references)
    15: "c1288079e9ca2e71",  # 15 (overlapped TP) is off unless chosen: references unchanged; tests/test_tp_overlap.py
    16: "c1288079e9ca2e71",  # 16 (DeepSpeed ZeRO-3 per-module fetches): no reference runs it; tests/test_pipeline_p2p.py
    17: "a62abaea224d34d4",  # MoE/EP priced; dense numbers unchanged, the breakdown gains ep_comm_s (0 here)
    18: "a62abaea224d34d4",  # Megatron finalize_model_grads, gradient buckets as the stack issues them, fabric fields: no reference request on those stacks
    19: "a62abaea224d34d4",  # the 500 W H100 at its measured GEMM rates: no reference request on that GPU
    20: "a62abaea224d34d4",  # 20 itemises MoE plans' expert memory: these dense references unchanged; tests/test_moe_service.py
    21: "a62abaea224d34d4",  # 21 adds the Triton flash kernel (an override): these references use FlashAttention-2
    22: "730a36c639bc610a",  # collectives across nodes as NCCL's tuner selects them (pricing.nccl, Stack.nccl)
    23: "730a36c639bc610a",  # 23 DP collectives per micro-batch or per step: no reference accumulates; tests/test_grad_accumulation.py
    24: "730a36c639bc610a",  # 24 moves the 2020-era residual rows to megatron-2020: no reference request on megatron
    25: "730a36c639bc610a",  # 25 (QK-norm, sinks, expert biases): no reference has them; tests/test_analytic_agreement.py
    26: "730a36c639bc610a",  # 26 latent attention on the meshplan stack: no reference has it; tests/test_runtime_mla.py
    27: "2cd43ba3d35a3c86",  # 27 FSDP2's copy-out / reduce copy-in on the compute stream: the llama3-8b ZeRO-3 reference
    28: "2cd43ba3d35a3c86",  # 28 DeepSpeed's blocking pipeline sends: no reference on deepspeed; tests/test_pipeline_p2p.py
    29: "2cd43ba3d35a3c86",  # 29 (sliding windows): no reference model has one; tests/test_sliding_window.py
    30: "2cd43ba3d35a3c86",  # 30 (the runtime's MLA as it runs): no reference has MLA; tests/test_mla_pricing.py
    31: "2cd43ba3d35a3c86",  # 31 scatter-gather pipeline sends: only megatron-2021 sets it; tests/test_megatron_2021.py
    32: "2cd43ba3d35a3c86",  # 32 (deepspeed-2021, DeepSpeed v0.5.0's ZeRO): no reference on it; tests/test_deepspeed_2021.py
    33: "2cd43ba3d35a3c86",  # 33 (MoE padded to capacity): no reference pads; tests/test_moe_pad_capacity.py
    34: "2cd43ba3d35a3c86",  # 34 (torchao rowwise's backward rescale): no reference trains in FP8; tests/test_fp8.py
    35: "2cd43ba3d35a3c86",  # 35 (deepspeed-2021's launches and list-collective copies): no reference on it
    36: "2cd43ba3d35a3c86",  # 36 (Megatron's MoE dispatch): no MoE reference on megatron; tests/test_moe_megatron_dispatch.py
    37: "511832e8b52ff59c",  # 37 (the gradient-accumulation pass per micro-batch): tests/test_grad_add.py
    38: "511832e8b52ff59c",  # 38 (torchtitan's built-in residual rows refitted): no reference request on torchtitan
    39: "511832e8b52ff59c",  # 39 (megatron's built-in residual rows): no reference request on megatron
    40: "511832e8b52ff59c",  # 40 (TE's FP8 saved inputs): no reference trains in FP8 on megatron; tests/test_fp8.py
    41: "511832e8b52ff59c",  # 41 (FP8 in a MoE block): no reference trains a MoE model in FP8; tests/test_moe_fp8.py
    42: "511832e8b52ff59c",  # 42 (torchtitan's FP8 / rerun SP all-gathers): no reference; tests/test_fp8_tp_gather.py
    43: "511832e8b52ff59c",  # 43 (FSDP1 gradient passes): no reference runs the fsdp1 engine; tests/test_fsdp2_copies.py
    44: "511832e8b52ff59c",  # 44 (DeepSpeed's TP-partitioned pipeline sends): no reference on deepspeed; tests/test_deepspeed_pipe_partition.py
    45: "511832e8b52ff59c",  # 45 (torchtitan CP as torch runs it): no reference on torchtitan CP; tests/test_torch_ring_cp.py
    46: "511832e8b52ff59c",  # 46 (torchtitan's residual rows refitted with its 405B PP rows): no reference on torchtitan
    47: "511832e8b52ff59c",  # 47 (FSDP2 under PP: whole fp32 gradients): no reference on torchtitan; meshplan already held them
    48: "3c7598aba8e3939f",  # 48 (H100/H200 GEMMs by XLA's measured sm_90 table): tests/test_gemm_table.py
    49: "3c7598aba8e3939f",  # 49 (gpt-oss's eager clamp; FA2 H100 head dim 64): no reference MoE or head dim 64 on H100;
    # tests/test_gpt_oss_megatron.py
    50: "3c7598aba8e3939f",  # 50 (sm_90 FP8 GEMMs no faster than the half-depth 16-bit GEMM): no FP8 reference; tests/test_fp8_gemm_shape.py
    51: "3c7598aba8e3939f",  # 51 (whole gradients from a chunk's first backward on): no reference has them
    52: "3c7598aba8e3939f",  # 52 (interleaved DP sync/param all-gather chunk by chunk): no interleaved megatron reference
    53: "3c7598aba8e3939f",  # 53 (optimizer_dtype "param", nemo-2407; TE's FP8 SP all-gathers): no FP8 megatron or
    # nemo-2407 reference; tests/test_nemo_optimizer.py
    54: "3c7598aba8e3939f",  # 54 (Megatron's padded vocabulary, fp32 FP8 main grads, apex remainders): no reference on a
    # Megatron-family preset; tests/test_megatron_vocab_grads.py
    55: "3c7598aba8e3939f",  # 55 (torch's ring-attention buffers in memory): no reference on torchtitan CP;
    # tests/test_torch_ring_memory.py
    56: "3c7598aba8e3939f",  # 56 (backward FP8 GEMMs' split accumulator on sm_90): no FP8 reference;
    # tests/test_fp8_split_accum.py
    57: "3c7598aba8e3939f",  # 57 (torchtitan's compiled ring attention waits for its collectives at issue): no
    # reference on torchtitan CP; tests/test_torch_ring_compiled.py
    58: "3c7598aba8e3939f",  # 58 (TP-overlap GEMM chunks at their own shapes): no reference overlaps TP;
    # tests/test_tp_overlap.py::test_chunks_priced_at_their_shape
    59: "3c7598aba8e3939f",  # 59 (free interleaved classes searched over every v and uneven cut): search only;
    # tests/test_interleaved_free_vs_pinned.py
    60: "3c7598aba8e3939f",  # 60 (torchtitan's SP layout copies): no reference on torchtitan TP with b > 1;
    # tests/test_sp_copies.py
    61: "3c7598aba8e3939f",  # 61 (YaRN RoPE unfused on Megatron-core): no reference has YaRN; tests/test_yarn_rope.py
    62: "3c7598aba8e3939f",  # 62 (recompute layernorm+moe_act): no reference is a MoE or MLA model on megatron;
    # tests/test_recompute_modules.py
    63: "3c7598aba8e3939f",  # 63 (CP blocks at the full-square flash rate, causal past 16K): no reference runs CP or
    # s > 16K; tests/test_cp_attention_rates.py
    64: "3c7598aba8e3939f",  # 64 (torchtitan rowwise async TP's unfused all-gathers, op-SAC's rerun FP8 casts): no
    # reference runs FP8 on torchtitan; tests/test_fp8_rowwise_titan.py
    65: "3c7598aba8e3939f",  # 65 (Composer's per-batch train-metric sync): no reference has train metrics;
    # tests/test_metric_sync.py
    66: "3c7598aba8e3939f",  # 66 (torchtitan's loss_parallel cross-entropy, 16 bytes a logit): memory only, no
    # reference plans torchtitan with tp > 1; tests/test_titan_loss_pp_memory.py
    67: "3c7598aba8e3939f",  # 67 (torch.distributed.pipelining's interleaved warm-up, torchtitan): memory only, no
    # reference plans torchtitan interleaved; tests/test_pp_order.py
    68: "3c7598aba8e3939f",  # 68 (interleaved warm-up per preset's Megatron-core: megatron capped): memory only, no
    # reference plans interleaved 1F1B at m = pp on the megatron preset; tests/test_pp_order.py
    69: "e0ae370ba4213f4d",  # 69 (the meshplan stack on A100/H100 takes the generation's pooled residual row)
    70: "25fedc07e17b4af1",  # 70 (sm_90 GEMMs at a training step's clock; hopper residuals refitted)
    71: "25fedc07e17b4af1",  # 71 (nemo-2407 splits evenly only: answers change, no estimate moves)
    72: "25fedc07e17b4af1",  # 72 (torchtitan's async TP under compiled kernels only: answers change, no estimate moves)
    73: "25fedc07e17b4af1",  # 73 (small interleaved classes settled by graph_bb: answers change, no estimate moves)
    74: "25fedc07e17b4af1",  # 74 (graph_bb: rounded incumbents, ties settle: a cut of equal step may be answered)
}


def host_body(**parallel) -> dict:
    """tiny-gpt on a CPU "GPU" with every host dispatch class measured (1 ms each collective, 100 µs each
    dispatch class): the host model's numbers, which no GPU reference reaches."""
    from planner.specs import HostDispatch
    from tests.host_support import CPU

    fields = dict.fromkeys(HostDispatch.model_fields, 100.0)
    fields.update(cpu_share=None, tp_collective_us=None, tp_collective_bytes=64 * 8 * 64 * 4)
    fields.update(dict.fromkeys(("tp_all_reduce_us", "tp_all_gather_us", "dp_all_reduce_us", "p2p_us"), 1000.0))
    fields.update(dp_all_gather_us=1000.0, dp_reduce_scatter_us=1000.0, dp_collective_bytes=50_240 * 4)
    fields.update(p2p_bytes=2 * 64 * 64 * 4)
    gpu = CPU.model_copy(update={"host_dispatch": HostDispatch(**fields)}).model_dump(mode="json")
    n = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("dp", 1)
    return {
        "model": "tiny-gpt",
        "cluster": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": n},
        "training": {"global_batch_size": 8, "seq_len": 64, "precision": "fp32"},
        "parallel": parallel,
        "options": {"time_limit_s": 20, "num_workers": 1},
    }


#: GPT-3 1.3B with its own LM head (the catalog's ties it to the embedding).
GPT3_UNTIED = get_model("gpt3-1.3b").model_copy(update={"tie_embeddings": False}).model_dump(mode="json")

REFERENCE = [
    body(
        "llama3-70b",
        nodes=8,
        gbs=512,
        seq=8192,
        tp=8,
        pp=4,
        micro_batch_size=1,
        schedule="interleaved-1f1b",
        recompute="selective",
        sequence_parallel=True,
        zero_stage=1,
    ),
    body("llama3-8b", nodes=2, gbs=128, seq=4096, tp=1, pp=1, micro_batch_size=2, recompute="full", zero_stage=3),
    # untied since cost model 9: the meshplan stack (the bundled runtime) runs no pp > 1 on tied embeddings
    body(GPT3_UNTIED, gpu="a100-sxm4-80gb", gbs=64, seq=2048, tp=2, pp=2, micro_batch_size=4, schedule="gpipe"),
    {
        **body("llama3-8b", nodes=2, gbs=64, seq=4096, tp=4, pp=2, micro_batch_size=1),
        "network": slow_network(16, 2).model_dump(),
    },
    host_body(tp=2, pp=1, dp=1, micro_batch_size=8, sequence_parallel=True),
    host_body(tp=1, pp=1, dp=2, micro_batch_size=4, zero_stage=3),
    host_body(tp=1, pp=2, dp=1, micro_batch_size=2, schedule="1f1b"),
]


def fingerprint(values: list) -> str:
    def norm(x):
        if isinstance(x, float):
            return float(f"{x:.9g}")
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items()}
        if isinstance(x, list):
            return [norm(v) for v in x]
        return x

    return hashlib.sha256(json.dumps(norm(values), sort_keys=True).encode()).hexdigest()[:16]


def test_cost_model_version_changes_with_the_numbers():
    got = fingerprint([planner.estimate(r).model_dump(mode="json", exclude={"notes"}) for r in REFERENCE])
    assert FINGERPRINTS.get(COST_MODEL_VERSION) == got, (
        f"the reference estimates moved (fingerprint {got}) under COST_MODEL_VERSION={COST_MODEL_VERSION}: "
        "bump planner.specs.version.COST_MODEL_VERSION and record the new fingerprint in FINGERPRINTS"
    )


# ------------------------------------------------------------------------------------------------
# Older plan files


SCHEMA1 = Path(__file__).parent / "golden" / "plans" / "schema1-tiny-gpt-response.json"


def test_a_schema1_plan_file_loads_without_its_groups_and_estimates_the_same(tmp_path):
    """A plan written by meshplan before schema 2 (rank groups, ``gpu`` beside the cluster, two memory
    fields) is read as a schema-2 plan: same configuration and estimate, cost-model version unknown (0)."""
    old = json.loads(SCHEMA1.read_text())
    assert old["schema_version"] == 1 and "tp_groups" in old["plans"][0]["mesh"]
    for document in (old, old["plans"][0]):  # the response, and the plan alone
        path = tmp_path / "plan.json"
        path.write_text(json.dumps(document))
        plan = load_plan(path)
        assert plan.schema_version == SCHEMA_VERSION and plan.inputs.cost_model_version == 0
        assert plan.mesh == mesh_layout(plan.parallel) and plan.gpu.id == "a100-sxm4-40gb"
        newer = ("cp", "cp_comm", "tp_comm_overlap", "ep", "etp")  # fields added since, at their defaults
        assert plan.parallel.model_dump(exclude=set(newer)) == old["plans"][0]["parallel"]
        assert [m.total_gib for m in plan.estimate.memory_per_stage] == old["plans"][0]["estimate"][
            "memory_per_stage_gib"
        ]
        again = planner.estimate_plan(replay_request(plan)).estimate  # replays under today's cost model (v4 moved it)
        assert again.step_time_s == pytest.approx(planner.estimate_plan(replay_request(plan)).estimate.step_time_s)
        assert again.step_time_s > 0
    assert PlanResponse.model_validate(old).cost_model_version == 0


def _with(document: dict, path: str, value) -> dict:
    data = json.loads(json.dumps(document))
    *keys, last = path.split(".")
    target = data
    for k in keys:
        target = target[int(k)] if isinstance(target, list) else target[k]
    target[last] = value
    return data


BAD_OLD = [
    # (change to the schema-1 response, words the error must hold)
    ("plans.0.mesh.tp_groups", [[0, 2], [1, 3]], ["mesh.tp_groups", "re-plan"]),
    ("plans.0.estimate.memory_per_stage", [], ["memory_per_stage", "re-plan"]),
    ("schema_version", 99, ["schema_version 99", "upgrade meshplan"]),
    ("plans.0.schema_version", 99, ["schema_version 99", "upgrade meshplan"]),
]


@pytest.mark.parametrize("path,value,words", BAD_OLD)
def test_a_plan_file_that_cannot_be_read_says_what_to_do(tmp_path, path, value, words):
    file = tmp_path / "plan.json"
    file.write_text(json.dumps(_with(json.loads(SCHEMA1.read_text()), path, value)))
    with pytest.raises(MeshplanError) as err:
        load_plan(file)
    assert all(w in str(err.value) for w in words), str(err.value)
