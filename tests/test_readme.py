"""The README runs as written: every ```bash block is executed, line for line, from a fresh copy of the
repository's `examples/` (as a fresh clone has them), with `meshplan` on PATH as `. .venv/bin/activate`
puts it there. What cannot run here is listed in SKIPPED with its reason (and nothing else is
skipped); the `curl` lines talk to a real `meshplan serve` this test starts on a free port. A README
command whose flags or files the code does not have fails here.

The examples/ files themselves are checked against the schemas and against each other."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from planner.specs import ModelSpec, PlanRequest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: Commands (by their first word) that cannot run here, and why. A README line starting with one of
#: these is replaced by `:`; any other line runs.
SKIPPED = {
    "make": "sets up .venv and starts the service or the whole suite: this test runs inside that suite, "
    "with the venv already set up",
    "docker": "no Docker daemon on the test machine",
    "sbatch": "no Slurm cluster; the script it submits is produced (and parsed) by the line before",
}
#: Pipes into programs that cannot run here, replaced by a check of what would have been piped.
PIPES = {
    "| kubectl apply -f -": "| python -c 'import sys, yaml; docs = [d for d in yaml.safe_load_all(sys.stdin) if d]; "
    'assert [d["kind"] for d in docs] == ["TrainJob", "ConfigMap"], docs\'',
}
#: Heavy steps scaled down here (none today: the README's commands are fast on 2 CPU cores). A
#: substitution must keep every flag, changing only values; the test checks that.
SCALE_DOWN: dict[str, str] = {}


def bash_blocks(text: str) -> list[tuple[str, str]]:
    """(heading, block) for every ```bash block, heading = the nearest ## or ### above it."""
    out, heading = [], ""
    for part in re.split(r"(^```bash\n.*?^```$)", text, flags=re.S | re.M):
        if part.startswith("```bash"):
            out.append((heading, part[len("```bash\n") : -3]))
        else:
            heads = re.findall(r"^#{2,3} (.+)$", part, flags=re.M)
            heading = heads[-1] if heads else heading
    return out


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, blank and comment-only lines dropped."""
    joined = block.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def prepare(block: str, port: int) -> str:
    """The block as this test runs it: skipped commands become `:`, pipes are checked instead, the
    service's port is the test's own."""
    out = []
    for line in commands(block):
        first = line.split()[0]
        if first in SKIPPED:
            out.append(f": skipped {first}")
            continue
        for pipe, check in PIPES.items():
            line = line.replace(pipe, check)
        for old, new in SCALE_DOWN.items():
            line = line.replace(old, new)
        out.append(line.replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
    return "\n".join(out) + "\n"


BLOCKS = bash_blocks(README.read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A fresh checkout's view: examples/ copied, `.venv/bin/activate` putting a `meshplan` of this
    tree (and this Python) on PATH."""
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", work / "examples")
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "meshplan").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m api.cli "$@"\n')
    (bin_dir / "meshplan").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "python3").symlink_to(sys.executable)
    torchrun = Path(sys.executable).parent / "torchrun"
    if torchrun.exists():
        (bin_dir / "torchrun").symlink_to(torchrun)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    return work


@pytest.fixture(scope="module")
def service(workdir):
    """A real `meshplan serve` on a free port, for the README's curl lines."""
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), MESHPLAN_DATABASE_URL=f"sqlite:///{workdir / 'service.db'}")
    env.pop("MESHPLAN_API_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"meshplan serve exited: {proc.stderr.read()[-2000:]}")
        time.sleep(0.3)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def _block_id(i: int, heading: str) -> str:
    return f"{i}-" + re.sub(r"\W+", "-", heading).strip("-").lower()


def _marks(block: str) -> list:
    """Blocks that launch multi-process training are `slow` (skipped by `-m 'not slow'`)."""
    return [pytest.mark.slow] if "meshplan run" in block or "bash job.sh" in block else []


@pytest.mark.parametrize(
    "index", [pytest.param(i, id=_block_id(i, h), marks=_marks(b)) for i, (h, b) in enumerate(BLOCKS)]
)
def test_readme_block_runs_as_written(index, workdir, service):
    """Blocks run in README order in one folder, as in one shell session: later blocks use the files
    earlier ones wrote, and the venv an earlier block activated."""
    heading, block = BLOCKS[index]
    script = "set -euo pipefail\n" + prepare(block, service)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if any(". .venv/bin/activate" in b for _, b in BLOCKS[:index]):
        env["PATH"] = os.pathsep.join([str(workdir / ".venv" / "bin"), env.get("PATH", "")])
    env.pop("MESHPLAN_API_TOKEN", None)
    run = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, text=True, capture_output=True, timeout=600)
    assert run.returncode == 0, f"README block under '{heading}' failed:\n{script}\n--- stderr:\n{run.stderr[-4000:]}"


def test_every_readme_block_is_covered_and_nothing_else_is_skipped():
    assert BLOCKS, "no bash blocks found in README.md"
    firsts = {line.split()[0] for _, b in BLOCKS for line in commands(b)}
    assert set(SKIPPED) <= firsts, f"SKIPPED lists commands the README no longer has: {set(SKIPPED) - firsts}"
    for old, new in SCALE_DOWN.items():  # a scaled-down step keeps every flag
        assert re.findall(r"--[\w-]+", old) == re.findall(r"--[\w-]+", new), (old, new)
        assert any(old in b for _, b in BLOCKS), f"SCALE_DOWN entry {old!r} no longer matches the README"
    for pipe in PIPES:
        assert any(pipe in b for _, b in BLOCKS), f"PIPES entry {pipe!r} no longer matches the README"


def test_the_pipeline_block_produced_what_the_readme_says(workdir):
    """After the blocks ran: the run compared itself with a CPU prediction and kept the plan's GPU one
    labelled; the user-program export gave every process its mesh coordinates."""
    from planner.specs import RunReport

    report_path = workdir / "report.json"
    if not report_path.exists():
        pytest.skip("the README blocks did not run (run the whole module)")
    report = RunReport.model_validate_json(report_path.read_text())
    assert report.predicted_on == "h100-sxm5-80gb" and report.step_time_ratio is None
    assert report.local_prediction is not None and report.local_prediction.predicted_on == "cpu"
    assert json.loads((workdir / "plan.json").read_text())["plans"][0]["cluster"]["num_nodes"] == 8


# ------------------------------------------------------------------------------------------------
# examples/


def test_examples_are_valid_and_agree():
    request = PlanRequest.model_validate_json((ROOT / "examples" / "request.json").read_text())
    assert (request.model, request.cluster.gpu, request.cluster.num_nodes, request.cluster.gpus_per_node) == (
        "llama3-70b",
        "h100-sxm5-80gb",
        8,
        8,
    )
    model = ModelSpec.model_validate_json((ROOT / "examples" / "model.json").read_text())
    mine = PlanRequest.model_validate_json((ROOT / "examples" / "request-my-model.json").read_text())
    assert mine.model == model  # the inline model of the request is examples/model.json


def quick_start_flags() -> dict[str, str]:
    """The flags of the README's first `meshplan plan --model ...` command (the quick-start case)."""
    for _, block in BLOCKS:
        for line in commands(block):
            if line.startswith("meshplan plan --model"):
                words = line.split()
                return {w: words[i + 1] for i, w in enumerate(words) if w.startswith("--") and i + 1 < len(words)}
    raise AssertionError("README has no `meshplan plan --model` command")


def test_readme_quick_start_matches_examples_request():
    flags = quick_start_flags()
    request = json.loads((ROOT / "examples" / "request.json").read_text())
    assert flags == {
        "--model": request["model"],
        "--gpu": request["cluster"]["gpu"],
        "--nodes": str(request["cluster"]["num_nodes"]),
        "--gpus-per-node": str(request["cluster"]["gpus_per_node"]),
        "--global-batch-size": str(request["training"]["global_batch_size"]),
        "--seq-len": str(request["training"]["seq_len"]),
    }


def test_readme_says_what_was_validated_where():
    """The README says plainly which figures come from GPUs (one lent H200, no multi-GPU run) and which
    from this CPU machine, and links the validation notes and the fidelity benchmark."""
    text = README.read_text()
    section = text[text.index("## What has been validated where") :]
    section = " ".join(section[: section.index("\n## ", 5)].split())
    assert "One GPU so far" in section and "no multi-GPU run has been measured" in section
    assert "On this CPU machine" in section and "[docs/validation.md](docs/validation.md)" in section
    assert "bench/bench_fidelity.py" in section
    assert (ROOT / "docs" / "validation.md").is_file()
