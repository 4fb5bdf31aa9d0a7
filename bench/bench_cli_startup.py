"""Start-up time of the `meshplan` commands people run most (``models``, ``gpus``, ``plan``).

Each command runs in a fresh interpreter (``python -m api.cli ...``, as the ``meshplan`` script does),
stdout to a pipe; the figures are the median wall and CPU time of N (BENCH_RUNS) runs. The target is < 0.5 s for ``models``
and ``gpus``, and for ``plan --help`` (everything ``plan`` loads before it starts solving: the
planner, OR-Tools). ``plan`` itself is timed on a small problem for reference (it includes the solve).
Wall times depend on the machine and its load (the CPU time, user + system of the child, much less
so): compare figures taken on the same machine at the same time (``BENCH_ROOT=/path/to/other/checkout``
times another tree with this script, e.g. ``git archive <base> | tar -x -C /tmp/base``).
Also prints which heavy packages each command path imported (none of SQLAlchemy, FastAPI, uvicorn,
torch is wanted outside ``serve``/``run``/``profile``)."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: The source tree to time (default: this one; BENCH_ROOT=<another checkout> to compare two trees).
ROOT = Path(os.environ.get("BENCH_ROOT") or Path(__file__).resolve().parents[1])
RUNS = int(os.environ.get("BENCH_RUNS", "7"))
COMMANDS = {
    "models": ["models"],
    "gpus": ["gpus"],
    "plan --help": ["plan", "--help"],
    "plan (tiny-gpt, 8 GPUs, incl. solve)": [
        "plan",
        "--model",
        "tiny-gpt",
        "--gpu",
        "h100-sxm5-80gb",
        "--global-batch-size",
        "32",
        "--seq-len",
        "128",
        "--top-k",
        "1",
    ],
}
HEAVY = ("sqlalchemy", "fastapi", "uvicorn", "starlette", "torch", "pydantic_settings")
PROBE = (
    "import sys, api.cli\ntry:\n    api.cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
)


def main() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"{'command':<40} {'wall median s':>13} {'wall min s':>10} {'CPU median s':>12}  heavy imports")
    for name, args in COMMANDS.items():
        times, cpu = [], []
        for _ in range(RUNS):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "api.cli", *args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
            )
            times.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        probe = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, env=env, capture_output=True, text=True)
        heavy = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ""
        print(
            f"{name:<40} {statistics.median(times):13.3f} {min(times):10.3f} {statistics.median(cpu):12.3f}  {heavy or '-'}"
        )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    print(f"{'(bare interpreter)':<40} {time.perf_counter() - t0:13.3f}")


if __name__ == "__main__":
    main()
