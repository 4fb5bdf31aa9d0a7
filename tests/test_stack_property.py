"""Issue 27 §1, property: for every training stack, seeded random requests (models of 1B–1T parameters, 8–16,384
GPUs) — every plan the planner returns exports to that stack's own targets without refusal (and to the
target named like the stack without a warning that a part of the plan is not what it runs), and the bundled
runtime (``runtime.validate.validate_plan``) accepts every plan of the ``meshplan`` stack, whose Llama-shaped models
also carry the attention variants its runtime builds (QK-norm per head or per projection; biases and sinks).

``MESHPLAN_STACK_PROPERTY_N`` sets the requests per stack (default 200, the issue's floor; each search is kept
small: micro-batch size pinned to 1, top_k 1, a 1 s CP-SAT limit, and enough GPUs for the model's states, so
that nearly every request has a plan to check)."""

from __future__ import annotations

import math
import os
import random

import pytest

import planner
from api.exporters import FORMATS, ExportOptions, export
from planner.specs import ModelSpec
from planner.specs.rules import stack_runs_config
from planner.specs.stack_rules import unbuilt_parts
from planner.specs.stacks import STACKS
from planner.workload.analytic import num_parameters
from runtime.validate import validate_plan

N = int(os.environ.get("MESHPLAN_STACK_PROPERTY_N", "200"))
OPTIONS = ExportOptions(image="nvcr.io/nvidia/pytorch:26.01-py3", job_name="prop", partition="gpu")
#: (hidden, heads): shapes of published models; the layer count sets the size.
SHAPES = [(2048, 16), (3072, 24), (4096, 32), (5120, 40), (6144, 48), (8192, 64), (12288, 96), (16384, 128), (20480, 160), (25600, 200)]  # fmt: skip
GPUS = ["h100-sxm5-80gb", "a100-sxm4-80gb", "h200-sxm-141gb"]
#: Words of the exporters' warnings that a part of the plan is not what the target runs (a schedule, a ZeRO
#: stage, SP, a recompute granularity): none may appear in the export to the stack's own target (its id).
NOT_RUN = (
    "has no GPipe",
    "ZeRO-2 maps to",
    "zero-bubble",
    "(ZeRO-1)",
    "no interleaved or V-shaped",
    "sequence parallelism has no",
    "selective recomputation",
)


def random_model(rng: random.Random) -> ModelSpec:
    """A Llama- or GPT-shaped model of 10^U(9, 12) parameters (12–200 layers), GQA or not, tied or not."""
    target = 10 ** rng.uniform(9, 12)
    llama = rng.random() < 0.7

    def shape(h: int) -> tuple[int, int]:
        ffn = (h * 8 // 3 + 255) // 256 * 256 if llama else 4 * h
        return ffn, round(target / (4 * h * h + (3 if llama else 2) * h * ffn))

    h, heads = rng.choice([s for s in SHAPES if 12 <= shape(s[0])[1] <= 200])
    ffn, layers = shape(h)
    return ModelSpec(
        name=f"random-{h}x{layers}",
        family="llama" if llama else "gpt",
        num_layers=layers,
        hidden_size=h,
        num_attention_heads=heads,
        num_kv_heads=rng.choice([heads, 8]) if llama else heads,
        ffn_hidden_size=ffn,
        vocab_size=rng.choice([32000, 50304, 128256]),
        activation="swiglu" if llama else "gelu",
        norm="rmsnorm" if llama else "layernorm",
        tie_embeddings=rng.random() < 0.4,
        max_seq_len=8192,
    )


#: Attention variants the bundled runtime builds (issue 23): Qwen3's per-head QK-norm, OLMoE's whole-projection one,
#: gpt-oss's attention (Q/K/V and output biases, sinks). Drawn for the ``meshplan`` stack's Llama-shaped models only,
#: from a generator of their own (the requests' generator is not advanced: every stack's requests stay as before).
ATTENTION_VARIANTS = [
    {},
    {"qk_norm": "head"},
    {"qk_norm": "projection"},
    {"qkv_bias": True, "attention_out_bias": True, "attention_sinks": True},
]


#: The stack whose export targets an era preset's plans go to (megatron-2020 has its own: Megatron-LM v2.0 flags).
ERA_TARGET_STACK = {"deepspeed-2021": "deepspeed", "nemo-2407": "megatron"}  # NeMo 24.07: Megatron-core's flags
ERA_TARGET_STACK |= {f"torchtitan-{era}": "torchtitan" for era in ("2404", "2408", "2412")}  # torchtitan's TOML


def random_request(rng: random.Random, stack: str) -> dict:
    """A random request for ``stack``: its model one the stack builds (``Stack.unbuilt``: Megatron-LM v2.0 builds
    tied GPT models only) with, on a stack of even stages only, a multiple of 8 layers (a prime count leaves it pp 1
    or pp = layers); in fp16 for a stack without bf16 (``megatron-2020``, ``deepspeed-2021``)."""
    model = random_model(rng)
    while unbuilt_parts(STACKS[stack], model):
        model = random_model(rng)
    if STACKS[stack].even_stages:  # layers divisible into its even stages, as the era's models were (24, 32, 96…)
        model = model.model_copy(update={"num_layers": max(8, round(model.num_layers / 8) * 8)})
    if stack == "meshplan" and model.family == "llama":
        variant = random.Random(f"attention-{model.model_dump_json()}").choice(ATTENTION_VARIANTS)
        model = ModelSpec.model_validate({**model.model_dump(), **variant})
    # at least the GPUs that hold the model's 16-bit weights, gradients and fp32 Adam states (16 B per
    # parameter) in about half of an 80 GB GPU; then up to 16,384
    need = math.ceil(num_parameters(model) * 16 / 40e9 / 8)
    nodes = 2 ** rng.randint(max(0, math.ceil(math.log2(need))), 11)
    gpus = nodes * 8
    gbs = min(4096, max(64, 2 ** rng.randint(int(math.log2(gpus)) - 3, int(math.log2(gpus)) + 1)))
    return {
        "model": model.model_dump(),
        "cluster": {"gpu": rng.choice(GPUS), "num_nodes": nodes, "gpus_per_node": 8},
        "training": {
            "global_batch_size": gbs,
            "seq_len": rng.choice([2048, 4096, 8192]),
            "stack": stack,
            **({"precision": STACKS[stack].precisions[0]} if "bf16" not in STACKS[stack].precisions else {}),
        },
        # one micro-batch a step where the stack accumulates none (torchtitan ≤ 9dec370 at pp = 1): mbs = gbs / dp
        "parallel": {"micro_batch_size": 1} if STACKS[stack].accumulation else {},
        "top_k": 1,
        "options": {"time_limit_s": 1, "num_workers": 1},
    }


@pytest.mark.slow
@pytest.mark.parametrize("stack", list(STACKS))
def test_every_plan_runs_on_its_stack(stack: str) -> None:
    rng = random.Random(f"issue-27-{stack}")
    # an era preset exports to its software's target (deepspeed-2021: the DeepSpeed config, same keys at v0.5.0)
    targets = [fmt for fmt, e in FORMATS.items() if e.stack == ERA_TARGET_STACK.get(stack, stack)]
    assert targets, stack
    planned, refused, variants = 0, [], 0
    for i in range(N):
        req = random_request(rng, stack)
        for plan in planner.plan(req).plans:
            planned += 1
            variants += plan.model.qk_norm is not None or plan.model.attention_sinks
            p = plan.parallel
            where = f"request {i} ({plan.model.name}, {p.num_gpus} GPUs): {p}"
            assert stack_runs_config(STACKS[stack], plan.model, p) is None, where
            for fmt in targets:
                try:
                    warnings = export(plan, fmt, OPTIONS).warnings
                except Exception as err:  # noqa: BLE001 — every refusal is collected and reported
                    refused.append(f"{fmt} refused {where}: {err}")
                    continue
                if fmt == stack:
                    refused += [f"{fmt} warned {where}: {w}" for w in warnings if any(x in w for x in NOT_RUN)]
            if stack == "meshplan":
                try:
                    validate_plan(plan, p.num_gpus)
                except Exception as err:  # noqa: BLE001
                    refused.append(f"runtime.validate refused {where}: {err}")
    assert not refused, f"{len(refused)} refusals, e.g.\n" + "\n".join(refused[:5])
    assert planned >= 0.8 * N, f"only {planned} of {N} requests were answered with a plan"
    assert stack != "meshplan" or variants >= N // 4, f"only {variants} plans of QK-norm / sink models"


def test_meshplan_fp8_recipes_are_what_the_runtime_runs() -> None:
    """Issue 24: the ``meshplan`` stack declares the FP8 recipes the bundled runtime trains with (``runtime.fp8``,
    torchao's float8 recipes), no FP8 all-gather (FSDP2 gathers in high precision there), and the runtime's
    validation accepts an FP8 plan of each declared recipe and refuses every other recipe naming
    ``training.fp8_recipe``."""
    import typing

    from planner.specs.common import Fp8Recipe
    from planner.specs.errors import MeshplanError
    from runtime import fp8
    from runtime.testing import make_plan

    stack = STACKS["meshplan"]
    assert stack.fp8_recipes == fp8.RECIPES
    assert stack.fp8_all_gather == ()
    for recipe in typing.get_args(Fp8Recipe):
        plan = make_plan("tiny-llama", precision="fp8", fp8_recipe=recipe, tp=2, dp=2, micro_batch_size=2)
        if recipe in stack.fp8_recipes:
            validate_plan(plan, 4)
            continue
        with pytest.raises(MeshplanError) as err:
            validate_plan(plan, 4)
        assert err.value.field == "training.fp8_recipe", recipe
        assert "tensorwise, rowwise" in err.value.fix and recipe in err.value.message
    validate_plan(make_plan("tiny-llama", precision="fp8", dp=2), 2)  # no recipe: the stack's default, tensorwise
    assert fp8.recipe(make_plan("tiny-llama", precision="fp8")) == stack.fp8_recipes[0]


def random_moe_model(rng: random.Random) -> ModelSpec:
    """A mixture of experts every layer of which is MoE (what the planner prices): a published attention shape,
    8–128 routed experts (top-1…8), an optional shared expert, softmax or sigmoid routing, 1B–1T parameters."""
    h, heads = rng.choice(SHAPES[:8])
    experts = rng.choice([8, 16, 32, 64, 128])
    top_k = rng.choice([k for k in (1, 2, 4, 8) if k <= experts])
    f = rng.choice([h // 4, h // 2, h, 2 * h]) // 64 * 64
    per_layer = 4 * h * h + 3 * h * f * experts
    layers = max(4, min(96, round(10 ** rng.uniform(9, 12) / per_layer)))
    return ModelSpec.model_validate(
        {
            "name": f"random-moe-{h}x{layers}-e{experts}k{top_k}",
            "family": "llama",
            "num_layers": layers,
            "hidden_size": h,
            "num_attention_heads": heads,
            "num_kv_heads": rng.choice([heads, 8]),
            "ffn_hidden_size": 4 * h,
            "vocab_size": rng.choice([32000, 151936]),
            "activation": "swiglu",
            "norm": "rmsnorm",
            "max_seq_len": 8192,
            "moe": {
                "num_experts": experts,
                "top_k": top_k,
                "expert_ffn_hidden_size": f,
                "shared_experts": rng.choice([0, 1]),
                "router": rng.choice(["softmax", "sigmoid"]),
            },
        }
    )


@pytest.mark.slow
def test_every_moe_plan_of_the_meshplan_stack_runs_in_its_runtime() -> None:
    """Issue 23: the ``meshplan`` stack declares MoE and EP (etp 1); every plan it returns for a random mixture of
    experts validates in ``runtime.validate`` and exports to the meshplan target without refusal."""
    rng = random.Random("issue-23-meshplan-moe")
    n = max(10, N // 4)
    planned, with_ep, refused = 0, 0, []
    for i in range(n):
        model = random_moe_model(rng)
        need = math.ceil(num_parameters(model) * 16 / 40e9 / 8)
        nodes = 2 ** rng.randint(max(0, math.ceil(math.log2(need))), 9)
        req = {
            "model": model.model_dump(),
            "cluster": {"gpu": rng.choice(GPUS), "num_nodes": nodes, "gpus_per_node": 8},
            "training": {"global_batch_size": max(64, nodes * 8), "seq_len": 4096, "stack": "meshplan"},
            "parallel": {"micro_batch_size": 1},
            "top_k": 1,
            "options": {"time_limit_s": 1, "num_workers": 1},
        }
        for plan in planner.plan(req).plans:
            planned += 1
            p = plan.parallel
            with_ep += p.ep > 1
            where = f"request {i} ({plan.model.name}, {p.num_gpus} GPUs): {p}"
            try:
                validate_plan(plan, p.num_gpus)
                export(plan, "meshplan", OPTIONS)
            except Exception as err:  # noqa: BLE001 — every refusal is collected and reported
                refused.append(f"refused {where}: {err}")
    assert not refused, f"{len(refused)} refusals, e.g.\n" + "\n".join(refused[:5])
    assert planned >= 0.8 * n, f"only {planned} of {n} requests were answered with a plan"
    assert with_ep > 0, "no plan used expert parallelism"
