"""Load on a local `meshplan serve` (uvicorn, real planner), with the issue 12 targets checked.

Phases of ``--duration`` seconds each, on loopback only:
  cached       ``--clients`` connections POST the same (pre-solved) request: answered from the store;
  cached-get   the same connections GET that plan by id;
  uncached     ``--uncached-clients`` clients (default 2, the solver's concurrency) POST distinct
               requests (a new global batch size each): every one is solved.
During every phase one more client probes GET /healthz every 50 ms (the server must stay
responsive). Each phase prints throughput, p50/p99 latency, errors (anything but 200/201), the
/healthz latency meanwhile, and the server's CPU time per request (Linux; the process and its
workers), which unlike the others does not depend on what else the machine runs. The load average
is printed with the figures.

The cached phases use ``wrk`` (C, keep-alive, 2 threads) when it is installed, so the load
generator costs the shared CPUs little (its own CPU per request is printed); otherwise an asyncio
httpx client (several times the client CPU per request: the figures are then lower). Targets
(issue 12, a 2-core machine): cached ≥ 500 req/s with p99 < 50 ms; /healthz p99 < 50 ms in every
phase; uncached p99 ≤ 2 × the planner's own p99 solve time (``solver.wall_time_s`` of the
answers); 0 errors. ``--check`` exits 1 when one is missed (errors always do). ``--repeat N`` runs
the phases N times on the same server (the machine's load average is printed with each phase) and
checks the targets on each figure's median.

    python bench/bench_api_load.py [--duration 10] [--clients 32] [--workers 1]
                                   [--database sqlite|postgres] [--server-root DIR] [--repeat 3] [--check]

``--database postgres`` starts a throwaway PostgreSQL server (Debian's binaries, as the tests do:
``tests/pg_support.py``); ``--server-root`` runs another checkout's server code (e.g. the previous
commit, for a before/after under the same conditions).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    folder: Path, root: Path, database_url: str, workers: int, env_extra: dict[str, str]
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHPLAN_")}
    env.update(PYTHONPATH=str(root), MESHPLAN_DATABASE_URL=database_url, MESHPLAN_LOG_LEVEL="warning", **env_extra)
    cmd = [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--workers", str(workers)],
        cwd=root,
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


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1 (as ``tests/pg_support.py`` starts it): its URL."""
    sys.path.insert(0, str(ROOT))
    from tests.pg_support import OS_USER, PostgresServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("--database postgres needs the PostgreSQL server binaries (apt-get install -y postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="meshplan-bench-pg-"))
    if os.geteuid() == 0:
        import pwd

        user = pwd.getpwnam(OS_USER)
        os.chown(folder, user.pw_uid, user.pw_gid)
    server = PostgresServer(bin_dir, folder)
    try:
        server.start()
        yield server.new_database()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def request_body(args: argparse.Namespace, batch: int) -> dict:
    return {
        "model": args.model,
        "cluster": {"gpu": args.gpu, "num_nodes": args.nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": batch, "seq_len": args.seq_len},
        "top_k": 3,
        "options": {"time_limit_s": args.time_limit, "num_workers": 1},
    }


def tree_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds so far of a process and its live descendants (uvicorn's workers)
    from Linux /proc; None elsewhere."""
    try:
        stats = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    except OSError:
        return None
    if pid not in stats:
        return None
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, _) in stats.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(stats[p][1] for p in tree) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def probe_health(url: str, stop: asyncio.Event) -> list[float]:
    """GET /healthz every 50 ms on one keep-alive connection until ``stop``: the latencies."""
    out: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        while not stop.is_set():
            start = time.perf_counter()
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get("/healthz")).status_code == 200:
                    out.append(time.perf_counter() - start)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)
    return out


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * _UNITS[unit]


def run_wrk(url: str, path: str, args: argparse.Namespace, body: dict | None, folder: Path) -> dict:
    """``wrk`` against ``path`` (a POST of ``body`` when given): requests, p50/p99, errors, its CPU."""
    script = folder / "bench.lua"
    lines = ['wrk.headers["Content-Type"] = "application/json"']
    if body is not None:
        lines += ['wrk.method = "POST"', f"wrk.body = [==[{json.dumps(body)}]==]"]
    script.write_text("\n".join(lines) + "\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        ["wrk", "-t", "2", "-c", str(args.clients), "-d", f"{args.duration:g}s", "--timeout", "30s", "--latency"]
        + ["-s", str(script), url + path],
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = done.stdout
    total = int(re.search(r"(\d+) requests in ([\d.]+\w+)", out).group(1))
    wall = _seconds(re.search(r"requests in ([\d.]+\w+)", out).group(1))
    dist = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)\s*$", out, re.M))
    if set(dist) != {"50", "99"}:
        raise SystemExit(f"wrk did not report latencies:\n{out}\n{done.stderr}")
    errors: dict[str, int] = {}
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        errors["non-2xx"] = int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        for name, n in zip(("connect", "read", "write", "timeout"), m.groups()):
            if int(n):
                errors[name] = int(n)
    client_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "requests": total - errors.get("non-2xx", 0),
        "wall": wall,
        "p50": _seconds(dist["50"]),
        "p99": _seconds(dist["99"]),
        "errors": errors,
        "client_cpu": client_cpu,
    }


async def run_httpx(url: str, path: str, clients: int, duration: float, bodies, method: str = "POST") -> dict:
    """``clients`` asyncio httpx clients in a loop (keep-alive): latencies, errors, the answers'
    ``response.solver.wall_time_s`` when they carry one."""
    latencies: list[float] = []
    own: list[float] = []
    errors: dict[str, int] = {}
    end = time.perf_counter() + duration
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    before = time.process_time()
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:

        async def client() -> None:
            while time.perf_counter() < end:
                start = time.perf_counter()
                try:
                    if method == "POST":
                        r = await http.post(path, json=next(bodies))
                    else:
                        r = await http.get(path)
                    ok, key = r.status_code in (200, 201), str(r.status_code)
                except httpx.HTTPError as exc:
                    ok, key = False, type(exc).__name__
                if not ok:
                    errors[key] = errors.get(key, 0) + 1
                    continue
                latencies.append(time.perf_counter() - start)
                if bodies is not None and r.status_code == 201:
                    own.append(r.json()["response"]["solver"]["wall_time_s"])

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "wall": wall,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "errors": errors,
        "own": own,
        "client_cpu": time.process_time() - before,
    }


async def with_probe(url: str, work) -> tuple[dict, list[float]]:
    stop = asyncio.Event()
    probe = asyncio.create_task(probe_health(url, stop))
    try:
        result = await work()
    finally:
        stop.set()
    return result, await probe


def measure(proc: subprocess.Popen, url: str, work) -> tuple[dict, list[float], float | None]:
    before = tree_cpu_seconds(proc.pid)
    result, health = asyncio.run(with_probe(url, work))
    after = tree_cpu_seconds(proc.pid)
    return result, health, (after - before) if before is not None and after is not None else None


def report(name: str, r: dict, health: list[float], cpu: float | None) -> dict:
    n = max(r["requests"], 1)
    row = {
        "phase": name,
        "requests": r["requests"],
        "throughput": r["requests"] / r["wall"],
        "p50_ms": r["p50"] * 1e3,
        "p99_ms": r["p99"] * 1e3,
        "errors": sum(r["errors"].values()),
        "error_kinds": r["errors"],
        "healthz_p50_ms": percentile(health, 50) * 1e3,
        "healthz_p99_ms": percentile(health, 99) * 1e3,
        "server_cpu_ms": cpu / n * 1e3 if cpu is not None else float("nan"),
        "client_cpu_ms": r["client_cpu"] / n * 1e3,
        "load": os.getloadavg()[0],
    }
    print_row(row)
    return row


def print_row(row: dict) -> None:
    errors = f" {row['error_kinds']}" if row["error_kinds"] else ""
    print(
        f"{row['phase']:11s} {row['requests']:7d} ok {row['throughput']:8.1f} req/s  p50 {row['p50_ms']:8.1f} ms  "
        f"p99 {row['p99_ms']:8.1f} ms  errors {row['errors']}{errors}  "
        f"| /healthz p50 {row['healthz_p50_ms']:.1f} ms p99 {row['healthz_p99_ms']:.1f} ms "
        f"| CPU/req server {row['server_cpu_ms']:.2f} ms, load generator {row['client_cpu_ms']:.2f} ms "
        f"| load {row['load']:.2f}",
        flush=True,
    )


def median_row(phase: str, rows: list[dict]) -> dict:
    """Each figure's median over the runs of a phase (errors: their sum)."""
    out: dict = {"phase": phase, "errors": sum(r["errors"] for r in rows), "error_kinds": {}}
    for r in rows:
        for kind, count in r["error_kinds"].items():
            out["error_kinds"][kind] = out["error_kinds"].get(kind, 0) + count
    for key in rows[0]:
        if key not in out:
            values = sorted(r[key] for r in rows)
            out[key] = values[len(values) // 2]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--clients", type=int, default=32, help="connections of the cached phases")
    parser.add_argument("--uncached-clients", type=int, default=2, help="clients of the uncached phase")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--server-root", type=Path, default=ROOT, help="the checkout whose server code runs")
    parser.add_argument("--client", choices=("auto", "wrk", "httpx"), default="auto", help="cached phases' client")
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--gpu", default="h100-sxm5-80gb")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--time-limit", type=float, default=2.0, help="options.time_limit_s of each solve")
    parser.add_argument("--solver-concurrency", type=int, default=2)
    parser.add_argument("--store-threads", type=int, default=None, help="MESHPLAN_STORE_THREADS of the server")
    parser.add_argument("--repeat", type=int, default=1, help="run the phases this many times; targets on the medians")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk") is not None)

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="meshplan-bench-")))
        if args.database == "postgres":
            database_url = stack.enter_context(postgres())
        else:
            database_url = f"sqlite:///{tmp / 'meshplan.db'}"
        env = {
            "MESHPLAN_SOLVER_CONCURRENCY": str(args.solver_concurrency),
            "MESHPLAN_SOLVER_QUEUE": str(4 * max(args.clients, args.uncached_clients)),
        }
        if args.store_threads is not None:
            env["MESHPLAN_STORE_THREADS"] = str(args.store_threads)
        proc, url = start_server(tmp, args.server_root.resolve(), database_url, args.workers, env)
        stack.callback(proc.wait, 30)
        stack.callback(proc.terminate)
        load = os.getloadavg()
        print(
            f"server {url} ({args.server_root.resolve()}): {args.workers} worker(s), {args.database}; "
            f"{args.model} on {args.nodes}×8 {args.gpu}, solver concurrency {args.solver_concurrency}, "
            f"time_limit_s {args.time_limit:g}; {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} "
            f"{load[2]:.2f}; {args.duration:g} s per phase; load generator: "
            + (f"wrk -t2 -c{args.clients} (keep-alive)" if use_wrk else f"httpx asyncio, {args.clients} clients")
            + f" for the cached phases, httpx asyncio ({args.uncached_clients} clients) for uncached",
            flush=True,
        )
        cached_body = request_body(args, 256)
        warm = httpx.post(f"{url}/v1/plans", json=cached_body, timeout=300)
        if warm.status_code not in (200, 201):
            raise SystemExit(f"warm-up plan failed: {warm.status_code} {warm.text[:500]}")
        plan_id = warm.json()["id"]
        for _ in range(50):  # every worker has seen the request (its key cache, its connections)
            httpx.post(f"{url}/v1/plans", json=cached_body, timeout=60)

        distinct = (request_body(args, 8 * b) for b in itertools.count(1) if 8 * b != 256)
        runs: dict[str, list[dict]] = {"cached": [], "cached-get": [], "uncached": []}
        own_p99s = []
        for _ in range(args.repeat):
            for name, path, body in (
                ("cached", "/v1/plans", cached_body),
                ("cached-get", f"/v1/plans/{plan_id}", None),
            ):
                if use_wrk:

                    async def work(path=path, body=body) -> dict:
                        return await asyncio.to_thread(run_wrk, url, path, args, body, tmp)
                else:

                    async def work(path=path, body=body) -> dict:
                        method = "POST" if body is not None else "GET"
                        bodies = itertools.repeat(body) if body is not None else None
                        return await run_httpx(url, path, args.clients, args.duration, bodies, method)

                runs[name].append(report(name, *measure(proc, url, work)))

            async def uncached_work() -> dict:
                return await run_httpx(url, "/v1/plans", args.uncached_clients, args.duration, distinct)

            result, health, cpu = measure(proc, url, uncached_work)
            runs["uncached"].append(report("uncached", result, health, cpu))
            own_p99s.append(percentile(result["own"], 99))
            print(
                f"uncached: the planner's own solve time (solver.wall_time_s) p50 {percentile(result['own'], 50) * 1e3:.1f} ms "
                f"p99 {own_p99s[-1] * 1e3:.1f} ms over {len(result['own'])} solves"
            )

    rows = [median_row(phase, phase_rows) for phase, phase_rows in runs.items()]
    if args.repeat > 1:
        print(f"medians of {args.repeat} runs:")
        for row in rows:
            print_row(row)
    own_p99 = sorted(own_p99s)[len(own_p99s) // 2]
    targets = [
        ("cached ≥ 500 req/s", rows[0]["throughput"] >= 500),
        ("cached p99 < 50 ms", rows[0]["p99_ms"] < 50),
        ("/healthz p99 < 50 ms in every phase", all(r["healthz_p99_ms"] < 50 for r in rows)),
        ("uncached p99 ≤ 2 × the planner's own p99", rows[2]["p99_ms"] <= 2 * own_p99 * 1e3),
        ("0 errors", all(r["errors"] == 0 for phase_rows in runs.values() for r in phase_rows)),
    ]
    for what, ok in targets:
        print(f"target {what:42s} {'PASS' if ok else 'FAIL'}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not targets[-1][1]:
        return 1
    return 1 if args.check and not all(ok for _, ok in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
