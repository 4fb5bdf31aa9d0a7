"""The per-batch sync of a Composer trainer's train metrics over all ranks (``Stack.train_metrics``; cost model 65).

Composer computes its train metrics after **every batch** (mosaicml/composer v0.16.4 ``composer/trainer/trainer.py``
``_train_loop`` :2085-2089 and v0.17.2 :2102-2106 — the pins of llm-foundry at b2a43a147 / 5e85bd62d — call
``_compute_and_log_metrics('train', ...)``, :1902-1914, i.e. ``metric.compute()`` of each), after the loss
all-reduce's ``.item()`` (:2056-2060) has waited for the step's device work, and before the next batch's first launch:
nothing else runs on the device meanwhile. torchmetrics (Composer pins ``>=0.10.0,<1.1``; read at v1.0.3) syncs every
state over the WORLD group in ``compute()`` (``sync_on_compute`` default True; ``metric.py`` ``_sync_dist`` :407-437:
one ``gather_all_tensors`` per state, then ``torch.stack`` and the reduction), and Composer's ``LanguageCrossEntropy``
(``composer/metrics/nlp.py`` v0.16.4:96-102) has two 0-dim states, ``sum_loss`` (float32) and ``total_items`` (int64),
which ``LanguagePerplexity`` inherits — llm-foundry's MPT keeps both metrics (``Stack.train_metrics`` = 2). Per state,
``gather_all_tensors`` (``utilities/distributed.py`` :96-121, ``_simple_gather_all_tensors`` :90-93 for a 0-dim one):

* ``torch.distributed.barrier()`` — ProcessGroupNCCL's one-byte all-reduce, after which the host waits for the device
  (``WorkNCCL::synchronizeInternal``: ``cudaDeviceSynchronize`` for a barrier's work);
* ``[torch.zeros_like(result) for _ in range(world_size)]`` — world-size fill kernels, launched one after another;
* ``dist.all_gather(list, result)`` — ProcessGroupNCCL's list all-gather (``planner.pricing.launches``): NCCL gathers
  world × elt bytes into a flat buffer, then the post hook copies each rank's slice out, one ``copy_`` launch per rank.

Priced per state, on the ``chain`` of ``launches``: the barrier's all-reduce; the fills, host-bound (``ranks``
launches, each kernel a few bytes); the gather once they are done, beside the host launching the ``ranks`` copy-outs
(the later of the two, the copies' kernels of a few bytes each); and the next state's barrier waits for all of it.
Not priced (so the figure is a floor): the Python around it (Composer's ``deepcopy`` of the metrics, the per-rank
list comprehension beyond its launches, torchmetrics' ``apply_to_collection``), the ``stack`` and reduction kernels.
The world group is every GPU of the job, whatever the layout: it grows with the GPU count at a fixed batch per GPU.
"""

from __future__ import annotations

from planner.pricing.device import Device
from planner.pricing.launches import launch_seconds

#: Bytes per element of each 0-dim state of one Composer cross-entropy metric: ``sum_loss`` (float32), ``total_items``
#: (``torch.tensor(0)``: int64) — composer/metrics/nlp.py v0.16.4:101-102.
STATE_BYTES = (4, 8)

#: ProcessGroupNCCL's barrier all-reduces a one-byte tensor (``at::kByte``).
BARRIER_BYTES = 1


def metric_sync_seconds(ctx: Device) -> float:
    """Seconds, once per step, of Composer's ``compute()`` of its ``Stack.train_metrics`` cross-entropy metrics over
    all the job's GPUs (module docstring); 0 without metrics or on one GPU."""
    ranks = ctx.num_gpus
    metrics = ctx.stack.train_metrics
    if metrics == 0 or ranks == 1:
        return 0.0
    per_node = min(ranks, ctx.cluster.gpus_per_node)
    link = "intra_node" if ranks <= ctx.cluster.gpus_per_node else "inter_node"
    launches = ranks * launch_seconds(ctx)
    barrier = ctx.comm.time("all_reduce", BARRIER_BYTES, ranks, link, per_node)
    per_metric = 0.0
    for elt in STATE_BYTES:
        gather = ctx.comm.time("all_gather", elt * ranks, ranks, link, per_node)
        per_metric += barrier + launches + max(gather, launches)
    return metrics * per_metric
