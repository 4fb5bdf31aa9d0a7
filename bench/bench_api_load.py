"""Load on a local `meshplan serve` (uvicorn, SQLite in a temporary folder, real planner).

Two phases of ``--duration`` seconds, each with ``--clients`` concurrent clients posting plan
requests in a loop:
  cached    every client posts the same (pre-solved) request: answered from the store;
  uncached  every post is a new request (a distinct global batch size): each is solved.
During both, one more client probes GET /healthz every 50 ms, to show the server stays responsive
while solves run. Prints throughput, p50/p99 latency, errors (anything but 200/201; must be 0), and
the server's CPU time per request (Linux), which unlike the others does not depend on what else
the machine is running.

    python bench/bench_api_load.py [--duration 10] [--clients 32] [--model llama3-8b] [--nodes 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHPLAN_")}
    env.update(
        PYTHONPATH=str(ROOT),
        MESHPLAN_DATABASE_URL=f"sqlite:///{folder / 'meshplan.db'}",
        MESHPLAN_LOG_LEVEL="warning",
        **env_extra,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "server.err", "wb"),
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server did not start: {(folder / 'server.err').read_text()[-2000:]}")


def request_body(args: argparse.Namespace, batch: int) -> dict:
    return {
        "model": args.model,
        "cluster": {"gpu": args.gpu, "num_nodes": args.nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": batch, "seq_len": args.seq_len},
        "top_k": 3,
        "options": {"time_limit_s": args.time_limit, "num_workers": 1},
    }


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def phase(url: str, args: argparse.Namespace, bodies) -> dict:
    latencies: list[float] = []
    health: list[float] = []
    errors: dict[str, int] = {}
    end = time.perf_counter() + args.duration
    limits = httpx.Limits(max_connections=args.clients + 1, max_keepalive_connections=args.clients + 1)

    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:

        async def client() -> None:
            while time.perf_counter() < end:
                start = time.perf_counter()
                try:
                    r = await http.post("/v1/plans", json=next(bodies))
                    ok = r.status_code in (200, 201)
                    key = str(r.status_code)
                except httpx.HTTPError as exc:
                    ok, key = False, type(exc).__name__
                if ok:
                    latencies.append(time.perf_counter() - start)
                else:
                    errors[key] = errors.get(key, 0) + 1

        async def prober() -> None:
            while time.perf_counter() < end:
                start = time.perf_counter()
                r = await http.get("/healthz")
                if r.status_code == 200:
                    health.append(time.perf_counter() - start)
                await asyncio.sleep(0.05)

        started = time.perf_counter()
        await asyncio.gather(prober(), *(client() for _ in range(args.clients)))
        wall = time.perf_counter() - started
    return {"requests": len(latencies), "wall": wall, "latencies": latencies, "health": health, "errors": errors}


def report(name: str, result: dict, cpu: float | None) -> None:
    lat = result["latencies"]
    errors = sum(result["errors"].values())
    per_request = f"  server CPU {cpu / max(result['requests'], 1) * 1e3:.1f} ms/req" if cpu is not None else ""
    print(
        f"{name:9s} {result['requests']:7d} ok  {result['requests'] / result['wall']:8.1f} req/s  "
        f"p50 {percentile(lat, 50) * 1e3:8.1f} ms  p99 {percentile(lat, 99) * 1e3:8.1f} ms  "
        f"errors {errors}{' ' + str(result['errors']) if errors else ''}  "
        f"| /healthz meanwhile p50 {percentile(result['health'], 50) * 1e3:.1f} ms p99 {percentile(result['health'], 99) * 1e3:.1f} ms"
        + per_request
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--gpu", default="h100-sxm5-80gb")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--time-limit", type=float, default=2.0, help="options.time_limit_s of each solve")
    parser.add_argument("--solver-concurrency", type=int, default=2)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="meshplan-bench-") as tmp:
        proc, url = start_server(
            Path(tmp),
            {
                "MESHPLAN_SOLVER_CONCURRENCY": str(args.solver_concurrency),
                "MESHPLAN_SOLVER_QUEUE": str(4 * args.clients),
            },
        )
        try:
            print(
                f"server {url}: {args.clients} clients, {args.duration:g} s per phase, "
                f"{args.model} on {args.nodes}×8 {args.gpu}, solver concurrency {args.solver_concurrency}, "
                f"time_limit_s {args.time_limit:g}, {os.cpu_count()} CPUs"
            )
            warm = httpx.post(f"{url}/v1/plans", json=request_body(args, 256), timeout=300)
            if warm.status_code not in (200, 201):
                raise SystemExit(f"warm-up plan failed: {warm.status_code} {warm.text[:500]}")
            before = cpu_seconds(proc.pid)
            cached = asyncio.run(phase(url, args, itertools.repeat(request_body(args, 256))))
            middle = cpu_seconds(proc.pid)
            report("cached", cached, middle - before if before is not None else None)
            distinct = (request_body(args, 8 * b) for b in itertools.count(1) if 8 * b != 256)
            uncached = asyncio.run(phase(url, args, distinct))
            after = cpu_seconds(proc.pid)
            report("uncached", uncached, after - middle if middle is not None else None)
        finally:
            proc.terminate()
            proc.wait(30)
    return 0 if not cached["errors"] and not uncached["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
