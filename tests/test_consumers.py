"""Every export, read by its target's own code at the version it is written for.

The plans come from the real planner (``planner.api.estimate_plan`` with every setting pinned, and
``planner.api.plan``'s best plan for Llama 3 70B with the pipeline degree pinned to 2, 3 and 4, as a new
user would ask). Each export is written to a file and handed to a check in ``tests/consumers/`` that
runs in the virtual environment holding the target's own packages (``make consumers``; pins in
pyproject.toml ``[dependency-groups]``): torchtitan 0.3.0's ``ConfigManager`` and 0.2.2's, DeepSpeed's
``DeepSpeedConfig``, megatron-core's ``TransformerConfig`` and microbatch calculator, the Kubernetes and
Kubeflow clients' models. The launch lines go to torch's own ``torchrun`` parser here. Each check runs
once per file for all plans; the tests below compare what the target read back with the plan.

A target that cannot run a plan gets no file: its exporter must refuse the plan, naming the field (``refusal``:
what a case declares, ``Case.refuses``, and the targets' known limits), and the test asserts that refusal while
the case's other exports, and every other case's, still go to the targets' own code.

Without the consumer environments these tests skip, saying how to install them; with
``MESHPLAN_REQUIRE_CONSUMERS=1`` (set by .ci/run, which installs them) a missing one fails instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from api.exporters import FORMATS, ExportOptions, export
from api.exporters.base import geometry, rank_layer_counts
from api.exporters.torchtitan import TT_SCHEDULES
from planner.api import estimate_plan
from planner.api import plan as search_plans
from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "tests" / "consumers"
REQUIRE = os.environ.get("MESHPLAN_REQUIRE_CONSUMERS") == "1"
#: check → (virtual environment, its dependency group in pyproject.toml).
VENVS = {
    "torchtitan_recipe": (os.environ.get("MESHPLAN_CONSUMERS_VENV", ROOT / ".venv-consumers"), "consumers"),
    "torchtitan_toml": (
        os.environ.get("MESHPLAN_TORCHTITAN_0_2_VENV", ROOT / ".venv-torchtitan-0.2"),
        "consumers-torchtitan-0-2",
    ),
    "deepspeed_config": (os.environ.get("MESHPLAN_CONSUMERS_VENV", ROOT / ".venv-consumers"), "consumers"),
    "megatron_core": (os.environ.get("MESHPLAN_CONSUMERS_VENV", ROOT / ".venv-consumers"), "consumers"),
    "kubernetes_models": (os.environ.get("MESHPLAN_CONSUMERS_VENV", ROOT / ".venv-consumers"), "consumers"),
}

H100 = "h100-sxm5-80gb"


class Case(NamedTuple):
    """How a plan is made (``plan_of``: "estimate", "plan", or a change to an estimated plan) and its request."""

    how: str
    request: dict
    #: export format → the plan field its exporter must refuse the plan on (the target cannot run it): that target
    #: gets no file of it and the tests assert the refusal (``refusal``)
    refuses: dict[str, str] = {}  # never mutated: ``_refused`` makes a new one


def _refused(case: Case, field: str, *formats: str) -> Case:
    """``case``, declaring that its exports to ``formats`` are refused, naming ``field``."""
    return case._replace(refuses={**case.refuses, **dict.fromkeys(formats, field)})


def _request(
    model: str | dict, nodes: int, gbs: int, seq: int, precision: str = "bf16", stack: str = "meshplan", **pins: Any
) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": H100, "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": gbs, "seq_len": seq, "precision": precision, "stack": stack},
        "parallel": pins,
    }


def _pinned(model: str | dict, nodes: int, gbs: int, seq: int, **kw: Any) -> Case:
    return Case("estimate", _request(model, nodes, gbs, seq, **kw))


def _zero_bubble(schedule: str, model: str, nodes: int, gbs: int, seq: int, **kw: Any) -> Case:
    """The planner does not price zero-bubble schedules (the runtime runs them from a hand-written
    plan): the planner's interleaved 1F1B plan with the schedule changed."""
    return Case(f"schedule={schedule}", _request(model, nodes, gbs, seq, schedule="interleaved-1f1b", **kw))


def _with_model(model: str, base: Case, **parallel: Any) -> Case:
    """The planner refuses to price mixed dense/MoE layer sequences (DeepSeek-V3) for now: a priced MoE plan with the
    model swapped in (and ``parallel`` changed: the layer split), as a hand-written plan file would be."""
    return Case(f"model={model}|{json.dumps(parallel)}", base.request)


def _searched(model: str, nodes: int, gbs: int, seq: int, **pins: Any) -> Case:
    req = _request(model, nodes, gbs, seq, **pins)
    return Case("plan", req | {"top_k": 1, "options": {"time_limit_s": 5, "num_workers": 1}})


_8B, _70B, _Q3 = "llama3-8b", "llama3-70b", "qwen3-30b-a3b"


def _padded(model: str, capacity_factor: float) -> dict:
    """A catalog MoE with a capacity factor, padded to capacity (``MoeSpec.pad_to_capacity``), as a request's model."""
    from planner.specs.catalog import get_model

    spec = get_model(model).model_dump()
    return {**spec, "moe": {**spec["moe"], "capacity_factor": capacity_factor, "pad_to_capacity": True}}


_SP = {"sequence_parallel": True}
#: name → how the plan is made. Dense and sharded data parallelism (ZeRO 0–3), recompute none /
#: selective / full, pp 1–4, even and uneven stage cuts, every schedule, bf16 and fp16.
# fmt: off
CASES: dict[str, Case] = {
    "dense-tp2-dp4": _pinned(
        _8B, 1, 64, 4096, tp=2, pp=1, dp=4, micro_batch_size=2, zero_stage=0, recompute="none", **_SP
    ),
    "zero1-pp2-1f1b-selective-fp16": _pinned(  # fp16 on a stack that trains in it (Stack.precisions)
        _8B, 2, 64, 8192, precision="fp16", stack="megatron", tp=4, pp=2, dp=2, micro_batch_size=1, schedule="1f1b", zero_stage=1, recompute="selective", **_SP
    ),
    "zero2-dp16-full": _pinned(_8B, 2, 128, 4096, tp=1, pp=1, dp=16, micro_batch_size=2, zero_stage=2, recompute="full"),
    "zero3-tp2-full": _pinned(
        _8B, 2, 128, 4096, tp=2, pp=1, dp=8, micro_batch_size=1, zero_stage=3, recompute="full", **_SP
    ),
    "zero3-dp16": _pinned(_8B, 2, 64, 4096, tp=1, pp=1, dp=16, micro_batch_size=1, zero_stage=3, recompute="none"),
    "zero2-pp2-gpipe": _pinned(
        _8B, 1, 32, 4096, tp=2, pp=2, dp=2, micro_batch_size=1, schedule="gpipe", zero_stage=2, recompute="none"
    ),
    "uneven-pp3-1f1b": _pinned(
        _8B, 3, 48, 8192, tp=8, pp=3, dp=1, micro_batch_size=1, schedule="1f1b", stage_layers=[10, 11, 11], zero_stage=0, recompute="none", **_SP
    ),
    "first-last-pp4": _pinned(
        _8B, 1, 32, 8192, tp=2, pp=4, dp=1, micro_batch_size=1, schedule="1f1b", stage_layers=[7, 9, 9, 7], zero_stage=1, recompute="full", **_SP
    ),
    "interleaved-pp4-v2-uneven": _pinned(
        _70B, 8, 256, 8192, tp=8, pp=4, dp=2, micro_batch_size=1, schedule="interleaved-1f1b", virtual_stages=2,
        stage_layers=[8, 11, 11, 10, 10, 10, 11, 9], zero_stage=1, recompute="selective", **_SP
    ),
    "interleaved-zero-bubble-pp2": _zero_bubble(
        "interleaved-zero-bubble", _8B, 1, 32, 4096, tp=2, pp=2, dp=2, micro_batch_size=1, virtual_stages=2, zero_stage=1, recompute="selective", **_SP
    ),
    "zbv-pp4": _zero_bubble(
        "zbv-zero-bubble", _70B, 4, 32, 8192, tp=8, pp=4, dp=1, micro_batch_size=1, virtual_stages=2,
        stage_layers=[9, 10, 10, 11, 11, 10, 10, 9], zero_stage=0, recompute="full", **_SP
    ),
    # The report: planner.plan's best Llama 3 70B plans with pp 2-4.
    "70b-searched-pp2": _searched(_70B, 8, 256, 8192, pp=2),
    "70b-searched-pp3": _searched(_70B, 3, 96, 8192, pp=3),
    "70b-searched-pp4": _searched(_70B, 8, 256, 8192, pp=4),
    # Mixtures of experts (issue 23), priced for the stacks that run them: EP carved from dp, ETP 1, TP with SP,
    # gpt-oss's sinks and biases, the search's own choice, and DeepSeek-V3's MLA, dense first layers and routing.
    "moe-qwen3-pp2-ep8": _pinned(
        _Q3, 2, 256, 4096, stack="megatron", tp=1, pp=2, dp=8, ep=8, etp=1, micro_batch_size=1, schedule="1f1b", zero_stage=1, recompute="full"
    ),
    "moe-gptoss-tp2-ep4": _pinned(
        "gpt-oss-20b", 1, 64, 4096, stack="torchtitan", tp=2, pp=1, dp=4, ep=4, etp=1, micro_batch_size=1, zero_stage=3, recompute="selective", **_SP
    ),
    # dropping and padding to capacity (--moe-expert-capacity-factor, --moe-pad-expert-input-to-capacity)
    "moe-qwen3-padded-ep8": _pinned(
        _padded(_Q3, 1.25), 2, 256, 4096, stack="megatron", tp=1, pp=2, dp=8, ep=8, etp=1, micro_batch_size=1, schedule="1f1b", zero_stage=1, recompute="full"
    ),
    # recompute pinned to the search's choice before cost model 62 (none): with layernorm+moe_act free, the search
    # picks it (12.66 against 12.99 s), a Megatron-core mode the torchtitan and DeepSpeed targets refuse
    "moe-qwen3-searched": _searched(_Q3, 2, 512, 4096, stack="megatron", etp=1, recompute="none"),
    "moe-deepseek-v3-mla": _with_model(
        "deepseek-v3",
        _pinned(_Q3, 8, 512, 4096, stack="megatron", tp=1, pp=1, dp=64, ep=64, etp=1, micro_batch_size=1, zero_stage=1, recompute="full"),
        stage_layers=[61],
    ),
    # Megatron-core's recomputation by module (--recompute-granularity selective --recompute-modules layernorm
    # moe_act): megatron-core reads both modules; torchtitan and DeepSpeed have no such mode and refuse the plan
    "moe-mixtral-pp4-layernorm-moe-act": _refused(
        _pinned("mixtral-8x7b", 4, 256, 4096, stack="megatron", tp=2, pp=4, dp=4, ep=4, etp=1, micro_batch_size=1, schedule="1f1b", zero_stage=1, recompute="layernorm+moe_act", **_SP),
        "plan.parallel.recompute", "torchtitan", "torchtitan-toml", "deepspeed",
    ),
}
MOE_CASES = [c for c in CASES if c.startswith("moe-")]
#: the launchers start meshplan's runtime, which has no MoE block yet: they refuse MoE plans without --command
#: (tests/test_expert_parallel.py), so only the dense plans are launched here; nor fp16 plans: the runtime trains in
#: bf16 / fp32 only (Stack.precisions; tests/test_exporters.py holds the refusal)
LAUNCHED = [c for c in CASES if c not in MOE_CASES and CASES[c].request["training"]["precision"] != "fp16"]
# fmt: on


@cache
def plan_of(case: str) -> Plan:
    how, request, _ = CASES[case]
    if how == "plan":
        return search_plans(request).plans[0]
    plan = estimate_plan(request)
    if how.startswith("model="):
        from planner.specs.catalog import get_model

        model, parallel = how.removeprefix("model=").split("|", 1)
        update = {"model": get_model(model), "parallel": plan.parallel.model_copy(update=json.loads(parallel))}
        return plan.model_copy(update=update)
    if how.startswith("schedule="):
        parallel = plan.parallel.model_copy(update={"schedule": how.removeprefix("schedule=")})
        plan = plan.model_copy(update={"parallel": parallel})
    return plan


def options(case: str) -> ExportOptions:
    return ExportOptions(job_name=f"mp-{case}", image="ghcr.io/example/train:1")


class Refusal(NamedTuple):
    field: str  # the plan field the error names
    words: tuple[str, ...]  # what its message and fix say


def _offer(stack: str) -> str:
    """What a training stack recomputes (``Stack.recompute``), as a sentence lists it: "none, selective or full"."""
    modes = STACKS[stack].recompute
    return f"{', '.join(modes[:-1])} or {modes[-1]}" if len(modes) > 1 else modes[0]


def refusal(case: str, fmt: str) -> Refusal | None:
    """Why the ``fmt`` target cannot run the case's plan (its exporter refuses it, naming the field), or None: what the
    case declares (``Case.refuses``: a recomputation by module names the target, its training stack and what that
    stack recomputes instead, ``Stack.recompute``, and the way out, megatron), else the targets' known limits on any
    plan (searched ones too): DeepSpeed's ``PipelineEngine`` asserts "ZeRO-2 and ZeRO-3 are incompatible with
    pipeline parallelism" (AutoTP runs every ZeRO stage since DeepSpeed 0.19.4: ``runtime/engine.py``) and
    DeepSpeed-MoE is model code the export does not write; torchtitan 0.3.0 removed expert tensor parallelism."""
    plan, declared = plan_of(case), CASES[case].refuses.get(fmt)
    if declared == "plan.parallel.recompute":
        stack = FORMATS[fmt].stack
        target = {"deepspeed": "DeepSpeed", "torchtitan": "torchtitan 0.3.0", "torchtitan-toml": "torchtitan 0.2.2"}
        offer = _offer(stack)
        said = (target[fmt], repr(plan.parallel.recompute), f"the {stack!r} training stack recomputes {offer}")
        return Refusal(declared, (*said, f"re-plan with parallel.recompute {offer}", "export to megatron"))
    if declared is not None:
        return Refusal(declared, ())
    p = plan.parallel
    if fmt == "deepspeed" and plan.model.moe is not None:
        return Refusal("plan.model.moe", ("DeepSpeed-MoE",))
    if fmt == "deepspeed" and p.pp > 1 and p.zero_stage >= 2:
        return Refusal("plan.parallel.zero_stage", ("incompatible with pipeline",))
    if fmt == "torchtitan" and p.etp > 1:
        return Refusal("plan.parallel.etp", ())
    return None


def assert_refused(case: str, fmt: str, why: Refusal) -> None:
    with pytest.raises(MeshplanError) as err:
        export(plan_of(case), fmt, options(case))
    assert err.value.field == why.field, str(err.value)
    for words in why.words:
        assert words in str(err.value), (words, str(err.value))


# ------------------------------------------------------------------------------------------------
# Running a check in its consumer's environment, once for all plans


def _pins(group: str) -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        reqs = tomllib.load(f)["dependency-groups"][group]
    return dict(r.split("==") for r in reqs)


#: check → the export formats it reads.
CHECK_FORMATS = {
    "torchtitan_recipe": ("torchtitan",),
    "torchtitan_toml": ("torchtitan-toml",),
    "deepspeed_config": ("deepspeed",),
    "megatron_core": ("megatron",),
    "kubernetes_models": ("kubeflow-pytorchjob", "kubeflow-trainjob"),
}


def _items(check: str, workdir: Path) -> list[dict]:
    """The exports the check reads: every case's, but those its format refuses (``refusal``: asserted by the tests)."""
    items = []
    for case in CASES if check != "kubernetes_models" else LAUNCHED:
        plan, opts = plan_of(case), options(case)
        world = plan.parallel.num_gpus
        for fmt in CHECK_FORMATS[check]:
            if refusal(case, fmt) is not None:
                continue
            result = export(plan, fmt, opts)
            if check == "torchtitan_recipe":
                (workdir / result.filename).write_text(result.content)
                module, config = re.search(r"--module (\S+) --config (\S+)", result.content).groups()
                items.append({"id": case, "dir": str(workdir), "module": module, "config": config, "world_size": world})
                continue
            names = {"torchtitan-toml": f"{case}.toml", "deepspeed": f"{case}.json", "megatron": f"{case}-megatron.sh"}
            path = workdir / names.get(fmt, f"{case}-{fmt}.yaml")
            path.write_text(result.content)
            if check == "torchtitan_toml":
                items.append({"id": case, "path": str(path), "world_size": world})
            elif check == "deepspeed_config":
                items.append({"id": case, "path": str(path), "dp": plan.parallel.dp})
            elif check == "megatron_core":
                items.append({"id": case, "path": str(path), "world_size": world})
            else:
                kind = {"kubeflow-pytorchjob": "PyTorchJob", "kubeflow-trainjob": "TrainJob"}[fmt]
                items.append({"id": f"{case}/{fmt}", "path": str(path), "kind": kind})
    return items


#: check → its results, or why it could not run (reported by every test that needs it, without rerunning).
_RESULTS: dict[str, dict[str, dict] | str] = {}


def consumer(check: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """``{item id: {"ok", "facts" | "error"}}`` from ``tests/consumers/<check>.py`` in its environment."""
    if check not in _RESULTS:
        _RESULTS[check] = _run(check, tmp_path_factory)
    results = _RESULTS[check]
    if isinstance(results, str):
        pytest.fail(results)
    return results


def _run(check: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict] | str:
    venv, group = VENVS[check]
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        why = (
            f"{python} not found: the export targets' own packages are not installed; "
            f"run `make consumers` (pyproject.toml dependency group {group!r})"
        )
        if REQUIRE:
            return why + " — MESHPLAN_REQUIRE_CONSUMERS=1 (.ci/run) needs them"
        pytest.skip(why + "; CI installs them")
    workdir = tmp_path_factory.mktemp(check)
    items_path, out_path = workdir / "items.json", workdir / "out.json"
    items_path.write_text(json.dumps(_items(check, workdir)))
    env = os.environ | {"TORCH_EXTENSIONS_DIR": str(Path(venv) / "torch_extensions"), "PYTHONWARNINGS": "ignore"}
    try:
        proc = subprocess.run(
            [str(python), str(CHECKS / f"{check}.py"), str(items_path), str(out_path)],
            capture_output=True,
            text=True,
            timeout=500,  # under pytest-timeout's 600 s, so a hang reports as this check
            env=env,
            cwd=workdir,
        )
    except subprocess.TimeoutExpired:
        return f"{check} ran over 500 s in {venv}"
    if proc.returncode != 0 or not out_path.exists():
        return f"{check} crashed in {venv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    out = json.loads(out_path.read_text())
    pins = _pins(group)
    for package, got in out["versions"].items():
        if package in pins and got != pins[package]:  # a stale environment fails, naming the fix
            return f"{venv} has {package} {got}, pyproject.toml pins {pins[package]}: run `make consumers`"
    return {r["id"]: r for r in out["results"]}


def accepted(results: dict[str, dict], item: str) -> dict[str, Any]:
    result = results[item]
    assert result["ok"], f"the target's own code rejected the export of {item}: {result['error']}"
    return result["facts"]


# ------------------------------------------------------------------------------------------------
# torchtitan


def _layers(part: list[str]) -> list[int]:
    return [int(name.split(".")[1]) for name in part if name.startswith("layers.")]


def _check_torchtitan(plan: Plan, facts: dict[str, Any], head: str) -> None:
    p, t = plan.parallel, plan.training
    m = plan.estimate.num_microbatches
    assert (facts["tp"], facts["pp"], facts["dp_replicate"] * facts["dp_shard"]) == (p.tp, p.pp, p.dp)
    assert facts["model_layers"] == plan.model.num_layers
    assert (facts["global_batch_size"], facts["seq_len"]) == (t.global_batch_size, t.seq_len)
    accumulation, rest = divmod(t.global_batch_size, facts["local_batch_size"] * p.dp)  # Trainer.__init__'s rule
    assert rest == 0
    if p.pp > 1:  # one step's micro-batches are the local batch
        assert (facts["local_batch_size"], facts["microbatch_size"], accumulation) == (
            p.micro_batch_size * m,
            p.micro_batch_size,
            1,
        )
        assert facts["schedule"] == "Schedule" + TT_SCHEDULES[p.schedule]
        parts = facts["parts"]
        assert [len(_layers(part)) for part in parts] == p.stage_layers
        assert sum((_layers(part) for part in parts), []) == list(range(plan.model.num_layers))
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", head]
        if "rank_stages" in facts:  # torchtitan's own placement of chunks on ranks (loop or V)
            per_rank = [sum(len(_layers(parts[s])) for s in stages) for stages in facts["rank_stages"]]
            assert per_rank == rank_layer_counts(plan)
    else:
        assert (facts["local_batch_size"], accumulation) == (p.micro_batch_size, m)
    if p.zero_stage in (1, 2, 3):
        assert facts["dp_shard"] == p.dp
        assert facts["fsdp_reshard_after_forward"] == ("always" if p.zero_stage == 3 else "never")
    assert facts["mixed_precision_param"] == ("float32" if t.precision == "fp32" else "bfloat16")
    if "async_tp" in facts:  # torchtitan's own config parser read the plan's overlapped TP (issue 24)
        assert facts["async_tp"] == p.tp_comm_overlap
    # expert parallelism (issue 23): torchtitan's ParallelDims carves ep out of dp_shard · cp · tp (0.2.2: / etp too)
    assert facts["ep"] == (p.ep if plan.model.moe is not None else 1)
    assert facts["dp_shard"] * p.cp * p.tp % (facts["ep"] * facts.get("etp", 1)) == 0
    if "etp" in facts:
        assert facts["etp"] == (p.etp if plan.model.moe is not None else 1)
    assert facts["moe"] == (plan.model.moe is not None)


@pytest.mark.parametrize("case", list(CASES))
def test_torchtitan_recipe_is_accepted_by_torchtitan_0_3(case, tmp_path_factory):
    """torchtitan 0.3.0's ConfigManager.parse_args(["--module", M, "--config", F]) accepts the recipe."""
    plan = plan_of(case)
    if (why := refusal(case, "torchtitan")) is not None:  # what torchtitan 0.3.0 cannot run, refused naming the field
        assert_refused(case, "torchtitan", why)
        return
    facts = accepted(consumer("torchtitan_recipe", tmp_path_factory), case)
    _check_torchtitan(plan, facts, "lm_head")
    ac = {"none": None, "selective": "SelectiveAC.Config", "full": "FullAC.Config"}[plan.parallel.recompute]
    assert facts["activation_checkpoint"] == ac
    if plan.parallel.tp > 1:
        assert facts["sequence_parallel"] == plan.parallel.sequence_parallel


@pytest.mark.parametrize("case", list(CASES))
def test_torchtitan_toml_is_accepted_by_torchtitan_0_2(case, tmp_path_factory):
    """torchtitan 0.2.2's ConfigManager.parse_args(["--job.config_file", PATH]) accepts the TOML."""
    plan = plan_of(case)
    if (why := refusal(case, "torchtitan-toml")) is not None:
        assert_refused(case, "torchtitan-toml", why)
        return
    facts = accepted(consumer("torchtitan_toml", tmp_path_factory), case)
    _check_torchtitan(plan, facts, "output")
    assert facts["activation_checkpoint"] == plan.parallel.recompute


# ------------------------------------------------------------------------------------------------
# DeepSpeed


@pytest.mark.parametrize("case", list(CASES))
def test_deepspeed_config_is_accepted_by_deepspeed(case, tmp_path_factory):
    plan = plan_of(case)
    p = plan.parallel
    if (why := refusal(case, "deepspeed")) is not None:  # meshplan refuses what DeepSpeed cannot run, naming the field
        assert_refused(case, "deepspeed", why)
        return
    facts = accepted(consumer("deepspeed_config", tmp_path_factory), case)
    assert facts["world_size"] == p.dp
    assert (
        facts["train_batch_size"],
        facts["train_micro_batch_size_per_gpu"],
        facts["gradient_accumulation_steps"],
    ) == (
        plan.training.global_batch_size,
        p.micro_batch_size,
        plan.estimate.num_microbatches,
    )
    assert facts["zero_stage"] == p.zero_stage
    assert (facts["bf16"], facts["fp16"]) == (plan.training.precision == "bf16", plan.training.precision == "fp16")
    assert facts["autotp_size"] == (p.tp if p.tp > 1 else 0)
    if p.pp > 1 and p.recompute != "none":
        assert facts["pipeline_activation_checkpoint_interval"] == 1


# ------------------------------------------------------------------------------------------------
# Megatron (megatron-core: Megatron-LM's own parser needs Python >= 3.12)


@pytest.mark.parametrize("case", list(CASES))
def test_megatron_args_are_accepted_by_megatron_core(case, tmp_path_factory):
    plan = plan_of(case)
    p = plan.parallel
    if (why := refusal(case, "megatron")) is not None:
        assert_refused(case, "megatron", why)
        return
    facts = accepted(consumer("megatron_core", tmp_path_factory), case)
    assert (facts["tp"], facts["pp"], facts["dp"]) == (p.tp, p.pp, p.dp)
    assert facts["num_layers"] == plan.model.num_layers
    assert facts["num_microbatches"] == plan.estimate.num_microbatches
    if p.schedule == "zbv-zero-bubble":  # Megatron has no V placement: 1F1B keeping each rank's layers
        assert (facts["virtual_stages"], facts["chunk_layers"]) == (1, rank_layer_counts(plan))
    else:
        assert (facts["virtual_stages"], facts["chunk_layers"]) == (p.virtual_stages, p.stage_layers)
    assert facts["sequence_parallel"] == p.sequence_parallel
    # Megatron's granularity and, selective, the modules it recomputes (TransformerConfig.recompute_modules): the core
    # attention by default; by module (layernorm+moe_act) the norms and the experts' activation
    granularity, modules = {
        "none": (None, None),
        "selective": ("selective", ["core_attn"]),
        "full": ("full", None),
        "layernorm+moe_act": ("selective", ["layernorm", "moe_act"]),
    }[p.recompute]
    assert facts["recompute_granularity"] == granularity
    if modules is not None:
        assert facts["recompute_modules"] == modules
    assert facts["recompute_method"] == ("uniform" if p.recompute == "full" else None)
    assert facts["use_distributed_optimizer"] == (p.zero_stage in (1, 2))
    assert facts["data_parallel_sharding_strategy"] == ("optim_grads_params" if p.zero_stage == 3 else "no_shard")
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}[plan.training.precision]
    assert facts["params_dtype"] == dtype
    moe, m = plan.model.moe, plan.model
    # sliding windows: FlashAttention/TE keep w − 1 keys before the query; megatron-core's own layer rule
    assert facts["window_size"] == (None if m.sliding_window is None else [m.sliding_window - 1, 0])
    assert facts["window_layers"] == [m.is_window_layer(i) for i in range(m.num_layers)]
    if moe is None:
        assert facts["num_moe_experts"] is None and facts["expert_model_parallel_size"] == 1
        return
    # issue 23: megatron-core's TransformerConfig read the experts, their layers and EP/ETP as the plan has them
    assert (facts["num_moe_experts"], facts["moe_router_topk"], facts["moe_ffn_hidden_size"]) == (
        moe.num_experts,
        moe.top_k,
        moe.expert_ffn_hidden_size,
    )
    assert (facts["expert_model_parallel_size"], facts["expert_tensor_parallel_size"]) == (p.ep, p.etp)
    assert facts["moe_grouped_gemm"] and facts["moe_token_dispatcher_type"] == "alltoall"
    assert facts["moe_shared_expert_intermediate_size"] == (moe.shared_experts * moe.shared_ffn or None)
    freq = facts["moe_layer_freq"]
    layers = [1 if m.is_moe_layer(i) else 0 for i in range(m.num_layers)]
    assert (freq if isinstance(freq, list) else [int(i % freq == 0) for i in range(m.num_layers)]) == layers
    assert facts["moe_router_score_function"] == moe.router
    # the drop the plan priced: capacity factor, policy, padded to capacity or not
    assert facts["moe_expert_capacity_factor"] == moe.capacity_factor
    assert facts["moe_pad_expert_input_to_capacity"] == moe.pad_to_capacity
    if moe.capacity_factor is not None:
        assert facts["moe_token_drop_policy"] == moe.drop_policy
    assert facts["multi_latent_attention"] == (m.mla is not None)
    if m.mla is None:  # a head's width: Megatron's default hidden / heads unless --kv-channels says otherwise
        width = m.attention_head_dim or m.hidden_size // m.num_attention_heads
        assert (facts["kv_channels"] or m.hidden_size // m.num_attention_heads) == width
    assert facts["qk_layernorm"] == (m.qk_norm is not None)


# ------------------------------------------------------------------------------------------------
# Kubernetes: the Kubeflow job and the plan's ConfigMap


@pytest.mark.parametrize("case,fmt", [(c, f) for c in LAUNCHED for f in ("kubeflow-pytorchjob", "kubeflow-trainjob")])
def test_kubeflow_exports_are_accepted_by_the_kubernetes_models(case, fmt, tmp_path_factory):
    plan = plan_of(case)
    if (why := refusal(case, fmt)) is not None:
        assert_refused(case, fmt, why)
        return
    geom = geometry(plan, options(case))
    facts = accepted(consumer("kubernetes_models", tmp_path_factory), f"{case}/{fmt}")
    assert facts["configmap"] == f"mp-{case}-plan"
    assert json.loads(facts["plan_files"]["plan.json"]) == plan.model_dump(mode="json")
    assert facts["mounted"] == ["/etc/meshplan/plan.json"]
    assert facts["command"] == ["torchrun", "-m", "runtime.train", "--plan", "/etc/meshplan/plan.json"]
    assert int(float(facts["gpus"])) == geom.nproc_per_node
    if fmt == "kubeflow-pytorchjob":
        replicas = {"Master": 1} | ({"Worker": geom.nnodes - 1} if geom.nnodes > 1 else {})
        assert (facts["replicas"], facts["nproc_per_node"]) == (replicas, str(geom.nproc_per_node))
    else:
        assert (facts["num_nodes"], facts["nproc_per_node"]) == (geom.nnodes, geom.nproc_per_node)
        assert facts["runtime_ref"] == "torch-distributed"


# ------------------------------------------------------------------------------------------------
# Launch lines: torch's own torchrun argument parser (in this environment: torch is meshplan's own)


def _launch_words(content: str, fmt: str) -> list[str]:
    if fmt in ("torchtitan", "torchtitan-toml"):  # the header's run line
        line = next(ln for ln in content.splitlines() if ln.lstrip("# ").startswith("torchrun "))
        return shlex.split(line.lstrip("# "))
    body = "\n".join(ln for ln in content.splitlines() if not ln.startswith("#")).replace("\\\n", " ")
    line = next(ln for ln in body.splitlines() if re.match(r"\s*(srun|torchrun)\b", ln))
    return shlex.split(line)


@pytest.mark.parametrize(
    "case,fmt", [(c, f) for c in LAUNCHED for f in ("torchrun", "slurm", "torchtitan", "torchtitan-toml")]
)
def test_launch_lines_parse_with_torchruns_own_parser(case, fmt):
    from torch.distributed.run import get_args_parser

    plan = plan_of(case)
    geom = geometry(plan, options(case))
    words = _launch_words(export(plan, fmt, options(case)).content, fmt)
    words = [str(geom.nnodes) if w == "$SLURM_NNODES" else w for w in words]
    args = get_args_parser().parse_args(words[words.index("torchrun") + 1 :])
    assert int(args.nnodes) * int(args.nproc_per_node) == plan.parallel.num_gpus
    assert int(args.nnodes) == geom.nnodes
    assert args.module and bool(args.standalone) == (geom.nnodes == 1)
    if fmt.startswith("torchtitan"):
        assert args.training_script == "torchtitan.train"
        flags = args.training_script_args
        assert ("--module" in flags and "--config" in flags) if fmt == "torchtitan" else "--job.config_file" in flags
    else:
        assert args.training_script == "runtime.train" and args.training_script_args == ["--plan", "plan.json"]


def test_require_consumers_turns_a_missing_environment_into_a_failure(tmp_path):
    """What .ci/run relies on: with MESHPLAN_REQUIRE_CONSUMERS=1 a missing consumer environment fails
    the tests (naming `make consumers`) instead of skipping them."""
    env = os.environ | {"MESHPLAN_REQUIRE_CONSUMERS": "1", "MESHPLAN_CONSUMERS_VENV": str(tmp_path / "absent")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "--no-header", "-p", "no:cacheprovider",
         f"{__file__}::test_megatron_args_are_accepted_by_megatron_core[dense-tp2-dp4]"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "make consumers" in proc.stdout and "1 failed" in proc.stdout
