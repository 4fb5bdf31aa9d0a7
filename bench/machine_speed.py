"""How fast this machine runs Python, printed beside the planning benchmarks' CPU seconds.

The issues' planning bars are CPU seconds "on this machine", and the machine changes between sessions: on 2026-12-04
the sandbox ran the same tree (2ccb1dc) 1.9-2.4x slower than on 2026-12-03 (``bench/bench_plan.py``: Llama 3 405B
0.46 -> 0.89-1.03 s, 405B at 131K 1.21 -> 2.78-2.95 s), with nothing else running. A fixed CPython workload timed in
CPU seconds next to the figures lets two sessions' tables be compared: divide each figure by its machine's reference.

The workload is the interpreter work the search does most (dict lookups keyed by tuples, float arithmetic, small
object allocation); the CP-SAT solves are C++ and scale with the same clock. Best of ``repeats`` runs, so a single
preemption does not count.
"""

from __future__ import annotations

import os
import time


def _workload() -> float:
    table: dict[tuple[int, int], float] = {}
    acc = 0.0
    for i in range(400_000):
        key = (i & 1023, i % 7)
        acc += table.get(key, 0.5) * 1.000001
        table[key] = acc % 97.0
    return acc


def reference_cpu_s(repeats: int = 3) -> float:
    """CPU seconds of the fixed workload, the best of ``repeats`` runs."""
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        _workload()
        best = min(best, time.process_time() - c0)
    return best


def describe() -> str:
    """One line for a benchmark's header: the reference workload's CPU seconds, the load and the CPU count."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"machine: reference workload {reference_cpu_s():.3f} CPU s (bench/machine_speed.py, best of 3); "
        f"load average {load} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    print(describe())
