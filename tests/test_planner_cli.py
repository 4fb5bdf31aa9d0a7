"""`meshplan plan` / `meshplan estimate` in a subprocess: tables, --json read back by load_plan,
--request files, and bad input → exit code 2 with the field named and no traceback."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.answer.io import load_plan
from planner.specs import Plan, PlanResponse

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "--model",
    "llama3-8b",
    "--gpu",
    "h100-sxm5-80gb",
    "--nodes",
    "1",
    "--gpus-per-node",
    "8",
    "--global-batch-size",
    "256",
    "--seq-len",
    "8192",
]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_plan_json_round_trips_through_load_plan(tmp_path: Path) -> None:
    out = run("plan", *SMALL, "--top-k", "2", "--json")
    assert out.returncode == 0, out.stderr
    resp = PlanResponse.model_validate_json(out.stdout)
    assert resp.solver.status == "OPTIMAL" and len(resp.plans) == 2
    f = tmp_path / "plan.json"
    f.write_text(out.stdout)
    assert load_plan(f) == resp.plans[0]


def test_plan_table_and_request_file(tmp_path: Path) -> None:
    req = {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 256, "seq_len": 8192},
        "parallel": {"tp": 2},
    }
    f = tmp_path / "req.yaml"
    import yaml

    f.write_text(yaml.safe_dump(req))
    out = run("plan", "--request", str(f))
    assert out.returncode == 0, out.stderr
    assert "OPTIMAL" in out.stdout and "why:" in out.stdout and "step s" in out.stdout


def test_estimate_flags_and_json() -> None:
    out = run(
        "estimate",
        *SMALL,
        "--tp",
        "2",
        "--pp",
        "2",
        "--micro-batch-size",
        "1",
        "--schedule",
        "gpipe",
        "--recompute",
        "full",
        "--zero-stage",
        "1",
        "--sequence-parallel",
        "--stage-layers",
        "15,17",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    p = Plan.model_validate_json(out.stdout)
    c = p.parallel
    assert (c.tp, c.pp, c.dp, c.schedule, c.recompute, c.zero_stage, c.sequence_parallel, c.stage_layers) == (
        2,
        2,
        2,
        "gpipe",
        "full",
        1,
        True,
        [15, 17],
    )
    table = run("estimate", *SMALL, "--tp", "8")
    assert table.returncode == 0 and "compute" in table.stdout and "fits" in table.stdout


@pytest.mark.parametrize(
    "args,field",
    [
        (["plan", *SMALL, "--tp", "3"], "--tp"),
        (["estimate", *SMALL, "--pp", "2", "--stage-layers", "1,x"], "--stage-layers"),
        (["plan", "--gpu", "h100-sxm5-80gb", "--global-batch-size", "8", "--seq-len", "128"], "--model"),
        (["plan", *SMALL[:2], "--gpu", "tpu-v9", "--global-batch-size", "8", "--seq-len", "128"], "--gpu"),
        (["estimate", *SMALL, "--schedule", "sideways"], "--schedule"),
        (["plan", "--request", "/nonexistent.json"], "--request"),
    ],
)
def test_bad_input_exits_2_naming_the_field(args: list[str], field: str) -> None:
    out = run(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert field in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


#: What the everyday commands must not load (start-up time: see bench/bench_cli_startup.py).
HEAVY = ("sqlalchemy", "fastapi", "starlette", "uvicorn", "pydantic_settings", "torch")
TINY = ["--model", "tiny-gpt", "--gpu", "h100-sxm5-80gb", "--global-batch-size", "32", "--seq-len", "128"]


@pytest.mark.parametrize(
    "args",
    [
        ["models"],
        ["gpus"],
        ["clusters"],
        ["stacks"],
        ["plan", *TINY, "--top-k", "1"],
        ["estimate", *TINY, "--tp", "2"],
        ["plan", "--help"],
        ["diff", "--help"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_everyday_commands_do_not_import_the_service_or_torch(args: list[str]) -> None:
    """The command runs for real in a fresh interpreter (as the `meshplan` script does); afterwards
    none of the service's or the runtime's heavy packages is loaded."""
    code = (
        "import sys, api.cli\ntry:\n    api.cli.main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]


# ---- one declaration: the flags of plan/estimate are PlanRequest's fields ------------------------

#: The public command-line surface. A change here is a change users see: it must be deliberate.
PLAN_FLAGS = [
    "--request",
    "--model",
    "--cluster-preset",
    "--gpu",
    "--nodes",
    "--gpus-per-node",
    "--intra-node-bandwidth",
    "--inter-node-bandwidth",
    "--intra-node-bandwidth-gbps",
    "--inter-node-bandwidth-gbps",
    "--intra-node-latency-us",
    "--inter-node-latency-us",
    "--oversubscription",
    "--scalable-unit-nodes",
    "--global-batch-size",
    "--seq-len",
    "--precision",
    "--fp8-recipe",
    "--optimizer",
    "--stack",
    "--tp",
    "--pp",
    "--dp",
    "--cp",
    "--cp-comm",
    "--micro-batch-size",
    "--schedule",
    "--virtual-stages",
    "--recompute",
    "--sequence-parallel",
    "--zero-stage",
    "--stage-layers",
    "--tp-comm-overlap",
    "--ep",
    "--etp",
    "--profile",
    "--network",
    "--calibration",
    "--top-k",
    "--allow-tp-across-nodes",
    "--time-limit-s",
    "--num-workers",
    "--prove",
    "--memory-headroom",
    "--json",
]
ESTIMATE_FLAGS = [f for f in PLAN_FLAGS if f not in {"--top-k", "--time-limit-s", "--num-workers", "--prove"}]


def _surface(command: str) -> list[str]:
    import typer.main

    from api.cli import app

    click_cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return [p.opts[0] for p in click_cmd.params if p.opts and p.opts[0] != "--help"]


@pytest.mark.parametrize("command, frozen", [("plan", PLAN_FLAGS), ("estimate", ESTIMATE_FLAGS)])
def test_cli_surface_is_frozen(command: str, frozen: list[str]) -> None:
    flags = _surface(command)
    assert not set(flags) - set(frozen), (
        f"new `meshplan {command}` flags {sorted(set(flags) - set(frozen))}: add them to the frozen list"
    )
    assert not set(frozen) - set(flags), f"`meshplan {command}` lost flags {sorted(set(frozen) - set(flags))}"
    assert flags == frozen  # and their order (the help lists them so)


def _leaf_paths(model: type, prefix: str = "") -> list[str]:
    """Every field path of a request whose value is not itself a spec (written independently of the CLI)."""
    import typing

    from pydantic import BaseModel

    out = []
    for name, info in model.model_fields.items():
        members = [a for a in typing.get_args(info.annotation) or [info.annotation] if a is not type(None)]
        specs = [a for a in members if isinstance(a, type) and issubclass(a, BaseModel)]
        if specs and len(specs) == len(members):
            out += [f"{prefix}{name}"] + _leaf_paths(specs[0], f"{prefix}{name}.")
        else:
            out.append(f"{prefix}{name}")
    return out


def test_every_request_field_is_a_flag_or_has_a_reason_not_to_be() -> None:
    from planner.answer import flags as request_flags
    from planner.specs import PlanRequest

    paths = _leaf_paths(PlanRequest)

    # a document flag (--profile FILE) takes the whole spec: its inner fields are not flags
    def excluded(p: str) -> bool:
        return any(p == r or p.startswith(r + ".") for r in request_flags.NOT_FLAGS) or any(
            p.startswith(r + ".") for r in request_flags.DOCUMENT_FLAGS
        )

    missing = [
        p
        for p in paths
        if p not in request_flags.FLAG_OF and not excluded(p) and not any(q.startswith(p + ".") for q in paths)
    ]
    assert not missing, f"request fields without a flag (and not in planner.answer.flags.NOT_FLAGS): {missing}"
    assert set(request_flags.FLAG_OF) <= set(paths), "a flag sets no request field"
    assert all(p in paths for p in request_flags.NOT_FLAGS), "NOT_FLAGS names a field the request does not have"
    assert len(set(request_flags.FLAG_OF.values())) == len(request_flags.FLAG_OF), "two fields share a flag"
    assert all(f.help for f in request_flags.FLAGS), [f.name for f in request_flags.FLAGS if not f.help]


def _sample(flag, tmp_path: Path) -> tuple[str | bool, object]:
    """A valid command-line value for ``flag`` and the request value it must become."""
    import typing

    from planner.specs import Calibration, LinkFit, NetworkProfile, Residuals
    from planner.specs.catalog import MODELS
    from planner.workload.analytic import analytic_profile

    if flag.kind == "file":  # a document: the file's content becomes the request field
        doc = {
            "profile": lambda: analytic_profile(MODELS["tiny-gpt"], micro_batch_sizes=[1], seq_len=8),
            "network": lambda: NetworkProfile(
                backend="nccl",
                device="NVIDIA H100 80GB HBM3",
                world_size=8,
                links=[
                    LinkFit(
                        link="intra_node", collective="all_reduce", group_size=8, alpha_s=1e-5, beta_s_per_byte=1e-11
                    )
                ],
            ),
            "calibration": lambda: Calibration(
                gpu="cpu", residuals=Residuals(compute_scale=3.0, kernel_overhead_us=40)
            ),
        }
        value = doc[flag.path]().model_dump(mode="json", exclude_none=True)
        path = tmp_path / f"{flag.path}.yaml"
        path.write_text(__import__("yaml").safe_dump(value))
        return str(path), json.loads(type(doc[flag.path]()).model_validate(value).model_dump_json())
    special = {
        "cluster.preset": "dgx-h100",
        "cluster.inter_node_bandwidth": "8x400Gb/s",
        "cluster.intra_node_bandwidth": "450 GB/s per GPU",
    }
    if flag.path in special:
        return special[flag.path], special[flag.path]

    from planner.specs import PlanRequest
    from planner.specs.errors import field_info

    info = field_info(PlanRequest, flag.path.split("."))
    choices = [
        a
        for t in [info.annotation, *typing.get_args(info.annotation)]
        if typing.get_origin(t) is typing.Literal
        for a in typing.get_args(t)
    ]
    if choices:
        return str(choices[-1]), choices[-1]
    if flag.path == "options.memory_headroom":  # a fraction: 2.5 is out of range
        return "0.1", 0.1
    return {
        "bool": (True, True),
        "int": ("2", 2),
        "float": ("2.5", 2.5),
        "list": ("3,5", [3, 5]),
        "str": ("some-id", "some-id"),
    }[flag.kind]


def test_every_flag_sets_its_request_field(tmp_path: Path) -> None:
    from planner.answer import flags as request_flags

    base = {
        "model": "tiny-gpt",
        "cluster": {"gpu": "h100-sxm5-80gb"},
        "training": {"global_batch_size": 8, "seq_len": 8},
    }
    f = tmp_path / "req.json"
    f.write_text(json.dumps(base))
    fp8 = tmp_path / "req-fp8.json"  # a recipe needs FP8 training
    fp8.write_text(json.dumps({**base, "training": {**base["training"], "precision": "fp8", "stack": "torchtitan"}}))
    for flag in request_flags.FLAGS:
        text, expected = _sample(flag, tmp_path)
        body = fp8 if flag.path == "training.fp8_recipe" else f
        request = request_flags.request_from(str(body), {flag.path: text}).model_dump(mode="json")
        value = request
        for key in flag.path.split("."):
            value = value[key]
        assert value == expected, (flag.name, value, expected)


@pytest.mark.parametrize(
    "command, ids",
    [
        ("models", lambda: list(importlib.import_module("planner.specs.catalog").MODELS)),
        ("gpus", lambda: list(importlib.import_module("planner.specs.catalog").GPUS)),
        # three tables: what each stack prices, what it runs (issue 27), its CP / FP8 / TP-overlap options
        ("stacks", lambda: list(importlib.import_module("planner.specs.stacks").STACKS) * 3),
    ],
)
@pytest.mark.parametrize("columns", ["80", "40"])
def test_catalog_tables_print_whole_ids_when_piped(command: str, ids, columns: str) -> None:
    """stdout is a pipe (as in `meshplan gpus | grep h100`): every id is printed whole on its row,
    whatever COLUMNS says."""
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": columns},
    )
    assert out.returncode == 0, out.stderr
    first_cells = [
        next(c.strip() for c in line.split("│") if c.strip()) for line in out.stdout.splitlines() if "│" in line
    ]
    assert first_cells == ids()


@pytest.mark.parametrize(
    "stack, words", [("meshplan", "priced for: meshplan ("), ("megatron", "priced for: megatron (")]
)
def test_plan_table_says_which_stack_priced_it(stack: str, words: str) -> None:
    """The terminal answer names the training stack its numbers are for (JSON carries training.stack)."""
    out = run(
        "plan",
        "--model",
        "tiny-gpt",
        "--gpu",
        "h100-sxm5-80gb",
        "--gpus-per-node",
        "2",
        "--global-batch-size",
        "8",
        "--seq-len",
        "128",
        "--top-k",
        "1",
        "--stack",
        stack,
    )
    assert out.returncode == 0, out.stderr
    assert words in out.stdout


def test_a_not_proven_plan_prints_the_flags_that_search_its_first_unproven_class(tmp_path: Path) -> None:
    """NeMo 24.12 GPT-3 20B on 64 H100 left free (the wide benchmark's row on the ``megatron`` preset:
    ``bench_support.on_megatron``; NeMo 24.07 splits evenly only) is FEASIBLE: the budget left classes below
    the answer (``solver.unproven``). The table prints the flags that pin the first; added to the same command, they
    search that one class (``uneven.budget_note``, ``flags.pin_flags``), at a cut no slower than the one listed for it.
    (Its Llama 2 7B row on 8 H100 was this case until cost model 73: ``graph_bb`` settles it.)"""
    from bench_support import bench_module, on_megatron

    body = on_megatron(dict(bench_module("bench_plan_wide").cases())["nemo2412_GPT3-20B_64gpu"])
    (tmp_path / "req.json").write_text(json.dumps(body))
    free = run("plan", "--request", str(tmp_path / "req.json"))
    assert free.returncode == 0, free.stderr
    lead = "to search the first of those classes alone, add: "
    line = next(x for x in free.stdout.splitlines() if x.startswith(lead))
    flags = line.removeprefix(lead).split()
    assert "--schedule" in flags and "--virtual-stages" in flags
    pinned = run("plan", "--request", str(tmp_path / "req.json"), *flags, "--top-k", "1", "--json")
    assert pinned.returncode == 0, pinned.stderr
    resp = PlanResponse.model_validate_json(pinned.stdout)
    assert resp.solver.configurations_considered == 1  # that class alone (searched to the time limit, not proven)
    first = PlanResponse.model_validate_json(run("plan", "--request", str(tmp_path / "req.json"), "--json").stdout)
    want = first.solver.unproven[0].parallel.model_dump()
    listed = first.solver.unproven[0].best_step_s
    assert listed is not None and resp.plans[0].estimate.step_time_s <= listed  # no slower than the cut listed
    assert resp.plans[0].parallel.model_dump(exclude={"stage_layers"}) == {
        k: v for k, v in want.items() if k != "stage_layers"
    }
