"""Numerical-equivalence check of the runtime against a single-process reference.

    torchrun --nproc-per-node W -m runtime.equivalence --cases cases.json --out results.json [--references refs.pt]

``cases.json`` is ``[{"id": str, "plan": Plan, "steps": int}]``. All cases run in this one launch
(one process group; each case builds a fresh DeviceMesh), because start-up dominates on CPU. For
each case every rank compares, at step 0, the global loss and the full gradient of each parameter it
holds with the reference's, then the loss and gradient norm of every later step; the maximum
differences over all ranks, and the whole step-0 gradient's relative L2 error (``grad_rel_l2``: FP8
runs, whose casts turn round-off into FP8 noise), go to ``results.json`` (written by rank 0 after each case).
A reference of a TP split (rowwise FP8, ``runtime.split_reference``) also carries the plain one-process
reference's step-0 gradients; the run's distances from those go to ``plain_grad_max_diff``/``plain_grad_rel_l2``.
A MoE with a capacity factor reports the assignments its ranks dropped over all steps (``moe_dropped``, each rank
counting the tokens it routes) beside the reference's (``ref_moe_dropped``).

The reference of a case is read from ``--references`` (``runtime.testing.write_references``: computed
once by the caller for all its launches) or, when that file lacks it, run here on every rank.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from planner.specs import Plan
from runtime.data import SyntheticTokens
from runtime.finish import finish_ranks
from runtime.job import Job, TrainConfig
from runtime.testing import reference, reference_key


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def fp8_linears(job: Job) -> int:
    """This rank's torchao ``Float8Linear`` modules (0 without FP8)."""
    if job.plan.training.precision != "fp8":
        return 0
    from runtime.fp8 import count_fp8_linears

    return sum(count_fp8_linears(m) for m in job.chunks.values())


def run_case(plan: Plan, steps: int, train: TrainConfig, refs: dict) -> dict:
    key = reference_key(plan, steps)
    if key not in refs:
        refs[key] = reference(plan, train, steps)
    plain = refs[key].get("plain_grads")
    ref_losses, ref_norms, ref_grads = refs[key]["losses"], refs[key]["norms"], refs[key]["grads"]
    started = time.perf_counter()
    job = Job.build(plan, train)
    data = SyntheticTokens(plan.model.vocab_size, seed=train.seed)
    losses, norms, grad_diff, worst = [], [], 0.0, ""
    diff_sq = ref_sq = 0.0  # the whole gradient's squared error and squared norm (each rank: the parameters it holds)
    plain_diff = plain_sq = plain_ref_sq = 0.0  # the same against the plain one-process reference (``plain_grads``)
    for step in range(steps):
        x, y = data.batch(step, plan.training.global_batch_size, plan.training.seq_len)
        loss = job.forward_backward(job.dp_slice(x), job.dp_slice(y))
        if step == 0:
            for name, p in job.named_parameters():
                if p.grad is None:
                    raise RuntimeError(f"parameter {name} got no gradient")
                full = _full(p.grad)
                diff = float((full - ref_grads[name]).abs().max())
                diff_sq += float((full - ref_grads[name]).double().pow(2).sum())
                ref_sq += float(ref_grads[name].double().pow(2).sum())
                if diff > grad_diff:
                    grad_diff, worst = diff, name
                if plain is not None:
                    plain_diff = max(plain_diff, float((full - plain[name]).abs().max()))
                    plain_sq += float((full - plain[name]).double().pow(2).sum())
                    plain_ref_sq += float(plain[name].double().pow(2).sum())
        norms.append(job.clip_grad_norm())
        job.optimizer_step()
        losses.append(float(loss))
    stats = torch.tensor(
        [
            grad_diff,
            max(abs(a - b) for a, b in zip(losses, ref_losses)),
            max(abs(a - b) for a, b in zip(norms, ref_norms)),
            float(sum(1 for _ in job.named_parameters())),
            diff_sq,
            ref_sq,
            float(fp8_linears(job)),
            plain_sq,
            plain_ref_sq,
            time.perf_counter() - started,
            plain_diff,
        ],
        dtype=torch.float64,
    )
    dist.all_reduce(stats[:3], op=dist.ReduceOp.MAX)
    # summed over ranks: parameters held, squared errors and norms (every parameter is held by the same number
    # of ranks, dp·cp·tp, so the ratio is the whole model's), FP8 linears
    dist.all_reduce(stats[3:9])
    dist.all_reduce(stats[9:], op=dist.ReduceOp.MAX)
    dropped = torch.tensor([sum(getattr(m, "dropped", 0) for c in job.chunks.values() for m in c.modules())])
    dist.all_reduce(dropped)  # the MoE assignments dropped over capacity, all steps, every rank's own tokens
    plain_stats = {}
    if plain is not None:
        plain_stats = {
            "plain_grad_max_diff": float(stats[10]),
            "plain_grad_rel_l2": math.sqrt(float(stats[7]) / float(stats[8])),
        }
    return {
        "grad_max_diff": float(stats[0]),
        "loss_max_diff": float(stats[1]),
        "grad_norm_max_diff": float(stats[2]),
        "param_tensors_over_ranks": int(stats[3]),
        "grad_rel_l2": math.sqrt(float(stats[4]) / float(stats[5])) if stats[5] > 0 else 0.0,
        "fp8_linears_over_ranks": int(stats[6]),
        "seconds": float(stats[9]),
        "losses": losses,
        "ref_losses": ref_losses,
        "worst_param_on_rank0": worst,
        "dp_wrapper": job.dp_wrapper,
        "moe_dropped": int(dropped),
        "ref_moe_dropped": refs[key].get("dropped", 0),
        **plain_stats,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--references", help="references saved by runtime.testing.write_references")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cases = json.loads(Path(args.cases).read_text())
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results: dict[str, dict] = {}
    refs: dict = torch.load(args.references, weights_only=True) if args.references else {}
    train = TrainConfig()
    for case in cases:
        try:
            results[case["id"]] = run_case(Plan.model_validate(case["plan"]), case.get("steps", 3), train, refs)
        except Exception:  # a failed case cannot be skipped safely (peers may wait in a collective)
            Path(f"{args.out}.rank{rank}.error").write_text(f"case {case['id']}:\n{traceback.format_exc()}")
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        if rank == 0:
            Path(args.out).write_text(json.dumps(results, indent=1))
    finish_ranks()  # every rank meets, then leaves without the gloo teardown (runtime.finish)


if __name__ == "__main__":
    main()
