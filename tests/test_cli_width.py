"""CLI output never truncates ids or values on an 80- or 100-column terminal (issue 13): every table
command, with stdout a pipe and with a pseudo-terminal of that width (python's pty module), prints each
value whole (no '…', every id on one line); `--help` prints option names whole; an error is one line
(not hard-wrapped mid-sentence) naming the flag the user typed."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from planner.specs.catalog import CLUSTER_PRESETS, GPUS, MODELS

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PLAN = [
    "--model",
    "llama3-8b",
    "--gpu",
    "h100-sxm5-80gb",
    "--nodes",
    "2",
    "--global-batch-size",
    "64",
    "--seq-len",
    "4096",
    "--time-limit-s",
    "20",
    "--num-workers",
    "1",
]
ESTIMATE = [
    "--model",
    "llama3-8b",
    "--gpu",
    "h100-sxm5-80gb",
    "--nodes",
    "2",
    "--global-batch-size",
    "64",
    "--seq-len",
    "4096",
    "--tp",
    "8",
    "--pp",
    "2",
    "--schedule",
    "interleaved-1f1b",
]


def _env(columns: int) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm-256color"}


def piped(args: list[str], columns: int) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        check=False,
        cwd=ROOT,
        env=_env(columns),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.returncode, out.stdout + out.stderr


def on_terminal(args: list[str], columns: int) -> tuple[int, str]:
    """Run the CLI with stdin/stdout/stderr a pseudo-terminal of ``columns`` columns, as a user's shell does."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal is the pty
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "api.cli", *args], _env(columns))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), ANSI.sub("", b"".join(chunks).decode()).replace("\r", "")


RUNNERS = {"pipe": piped, "pty": on_terminal}


def _json(args: list[str]) -> object:
    code, out = piped([*args, "--json"], 200)
    assert code == 0, out
    return json.loads(out)


def _whole(values: list[str], text: str) -> list[str]:
    """The values not printed whole: every space-free value must be on one line; a value with spaces
    (which a cell may wrap at a space) must have each of its words whole."""
    lines = text.splitlines()
    missing = []
    for value in values:
        for word in value.split():
            if not any(re.search(rf"(?<![\w.,-]){re.escape(word)}(?![\w.,-])", line) for line in lines):
                missing.append(word)
    return missing


def expected(command: str, tmp: Path) -> tuple[list[str], list[str]]:
    """(args, the values the output must hold whole), read from the command's own --json output."""
    if command == "models":
        return ["models"], [m.name for m in MODELS.values()] + [str(m.max_seq_len) for m in MODELS.values()]
    if command == "gpus":
        return ["gpus"], list(GPUS) + [f"{g.hbm_bandwidth_GBps:g}" for g in GPUS.values()]
    if command == "clusters":
        return ["clusters"], [*CLUSTER_PRESETS] + [p.gpu for p in CLUSTER_PRESETS.values()] + [
            p.inter_node_bandwidth for p in CLUSTER_PRESETS.values()
        ] + [p.intra_node_bandwidth for p in CLUSTER_PRESETS.values()] + [
            p.source.split()[-1] for p in CLUSTER_PRESETS.values() if p.source.split()[-1].startswith("https://")
        ]
    if command == "export-formats":
        from api import exporters

        return ["export-formats"], [e["id"] for e in exporters.export_formats()]
    if command == "plan":
        response = _json(["plan", *PLAN, "--top-k", "3"])
        values = []
        for p in response["plans"]:
            c, e = p["parallel"], p["estimate"]
            values += [
                c["schedule"],
                ",".join(map(str, c["stage_layers"])),
                f"{e['step_time_s']:.4g}",
                f"{e['tokens_per_s']:,.0f}",
                f"{e['peak_memory_gib']:.1f}",
                p["explanation"]["binding_constraint"],
            ]
        return ["plan", *PLAN, "--top-k", "3"], values
    if command == "estimate":
        p = _json(["estimate", *ESTIMATE])
        b = p["estimate"]["breakdown"]
        return ["estimate", *ESTIMATE], [
            p["parallel"]["schedule"],
            f"{p['estimate']['tokens_per_s']:,.0f}",
            *(f"{b[k]:.4g}" for k in ("compute_s", "tp_comm_s", "pp_bubble_s", "pp_p2p_s")),
        ]
    if command == "diff":
        a, b = tmp / "a-plan-with-a-long-file-name.json", tmp / "b-plan-with-a-long-file-name.json"
        a.write_text(json.dumps(_json(["plan", *PLAN, "--top-k", "1"])))
        b.write_text(json.dumps(_json(["estimate", *ESTIMATE])))
        rows = {r["name"]: r for part in ("settings", "time", "memory") for r in _json(["diff", str(a), str(b)])[part]}
        return ["diff", str(a), str(b)], [
            str(a),
            str(b),
            "stage_layers",
            "8,8,8,8",
            f"{rows['step_time_s']['b']:.4g}",
            f"{rows['stage 1 total_gib']['b']:.2f}",
            "interleaved-1f1b",
        ]
    raise AssertionError(command)


COMMANDS = ["models", "gpus", "clusters", "export-formats", "plan", "estimate", "diff"]


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("width")
    return {c: expected(c, tmp) for c in COMMANDS}


@pytest.mark.parametrize("stdout", ["pipe", "pty"])
@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("command", COMMANDS)
def test_output_holds_every_value_whole(cases, command, columns, stdout):
    args, values = cases[command]
    code, text = RUNNERS[stdout](args, columns)
    assert code == 0, text
    assert "…" not in text and "..." not in text.replace("N,N,...", "")
    assert not _whole(values, text), (_whole(values, text), text)
    if stdout == "pty":  # tables fit the terminal; prose lines are left for the terminal to wrap (soft-wrapped)
        prose = ("solver:", "priced for:", "why:", "runner-up:", "note:", "A: ", "B: ", "configuration:")
        table = [
            line
            for line in text.splitlines()
            if not line.startswith(prose) and not re.match(r"[\w.-]+ {2,}\S", line) and not re.match(r"[\w.-]+: ", line)
        ]
        assert max(map(len, table), default=0) <= columns, text


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("command", ["plan", "estimate", "diff"])
def test_help_prints_option_names_whole(command, columns):
    import typer.main

    from api.cli import app

    click_cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    names = [o for p in click_cmd.params for o in p.opts + p.secondary_opts if o.startswith("--")]
    code, text = on_terminal([command, "--help"], columns)
    assert code == 0, text
    assert not _whole(names, text), _whole(names, text)


@pytest.mark.parametrize(
    "args, flag",
    [
        (
            [
                "estimate",
                "--model",
                "llama3-8b",
                "--gpu",
                "h100-sxm5-80gb",
                "--global-batch-size",
                "64",
                "--seq-len",
                "4096",
                "--inter-node-bandwidth",
                "400 Gb/s",
            ],
            "--inter-node-bandwidth",
        ),
        (
            [
                "plan",
                "--model",
                "llama3-8b",
                "--cluster-preset",
                "dgx-z9",
                "--global-batch-size",
                "64",
                "--seq-len",
                "4096",
            ],
            "--cluster-preset",
        ),
        (
            [
                "estimate",
                "--model",
                "llama3-8b",
                "--gpu",
                "h100-sxm5-80gb",
                "--global-batch-size",
                "64",
                "--seq-len",
                "4096",
                "--tp",
                "3",
            ],
            "--tp",
        ),
    ],
)
@pytest.mark.parametrize("columns", [80])
def test_errors_are_one_line_naming_the_flag(args, flag, columns):
    code, text = on_terminal(args, columns)
    assert code == 2, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert errors and errors[0].startswith(f"error: {flag}"), text
    # each error is one line with its fix: no sentence continues on the next line
    assert all(". Fix: " in e or "Fix:" in e for e in errors), text
    assert all(line.startswith("error:") for line in text.strip().splitlines()), text
    assert "Traceback" not in text
