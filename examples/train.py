"""Your own training program, launched by a meshplan export (torchrun, Slurm, Kubeflow) with
`--command "examples/train.py"`: the export sets the MESHPLAN_* variables (docs/exports.md) and
runtime.env turns them into the plan's layout and DeviceMesh (dims pp, dp, tp).

    meshplan export --plan tiny-plan.json --format torchrun --plan-path tiny-plan.json \
                    --command "examples/train.py" --out job.sh && bash job.sh
"""

import torch
import torch.distributed as dist

from runtime.env import layout_from_env, mesh_from_env, plan_from_env


def main() -> None:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    layout = layout_from_env()  # tp, pp, dp, micro_batch_size, num_microbatches, schedule, stage_layers, ...
    mesh = mesh_from_env()  # init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    plan = plan_from_env()  # the whole Plan (model, estimate, tp_plan) from $MESHPLAN_PLAN
    pp_rank, dp_rank, tp_rank = (mesh.get_local_rank(d) for d in ("pp", "dp", "tp"))
    # Build your model here: the layers of pipeline stage pp_rank are layout.stage_layers[pp_rank] (v = 1),
    # shard it over mesh["tp"], replicate/shard over mesh["dp"], feed layout.micro_batch_size sequences.
    print(
        f"rank {dist.get_rank()}: pp {pp_rank}/{layout.pp} dp {dp_rank}/{layout.dp} tp {tp_rank}/{layout.tp}, "
        f"{plan.model.name}, stage layers {list(layout.stage_layers)}, micro-batch {layout.micro_batch_size} × "
        f"{layout.num_microbatches}, schedule {layout.schedule}",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
