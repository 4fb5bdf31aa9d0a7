"""What ``torch.distributed.pipelining`` keeps of every micro-batch on a pipeline rank, beyond the activations autograd
saved (``Stack.pp_kept_outputs``, cost model 66; read at torch 2.6.0, 2236df1, the release nearest the nightly 1963fc8
torchtitan's 2024-12 benchmark ran):

* every stage appends each micro-batch's output to ``output_chunks`` (``stage.py:703`` ``forward_one_chunk``), cleared
  only by the next step's ``clear_runtime_states`` (:507-525, called first in ``schedules.py:491`` ``step``): at the
  last steady-state step of 1F1B or GPipe's backward phase all m are held. On the LM head's stage these are the
  logits, [mb, s, V/t] in the activations' dtype (torchtitan's head: ``ColwiseParallel(output_layouts=Shard(-1),
  use_local_output=False)``, a DTensor the loss reads), elsewhere the boundary the next stage receives (with SP
  [mb, s/t, h]). pytorch/pytorch#153383 (2025-05) appends on the last stage only, and torchtitan later passes
  ``return_outputs=False`` (``trainer.py``), which keeps none: a stack of those versions leaves the flag off;
* every stage but the last allocates one gradient receive buffer per micro-batch for the whole run
  (``_prepare_backward_infra`` :293-302 → ``PipelineStage._create_grad_recv_info`` :1462-1480, ``torch.empty`` of the
  output's shape, ``_make_tensor_from_meta`` :99-111).

Not priced (a lower bound kept): the activation receive buffers of stages after the first, one per micro-batch
(``_prepare_forward_infra`` :1409-1443; those of the micro-batches in flight are the saved inputs the activations
already count), and each micro-batch's input gradient left in its receive buffer's ``.grad`` until the next step
(``_backward.py:351`` ``torch.autograd.backward``; cleared at ``stage.py:519-525``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.specs.vocab import local_vocab

if TYPE_CHECKING:
    from planner.compose.context import Context
    from planner.compose.cost import Candidate
    from planner.compose.terms import SharedTerms


def kept_outputs(ctx: Context, c: Candidate, s: SharedTerms, m: int) -> tuple[int, ...]:
    """Bytes each pipeline rank keeps for the step's m micro-batches (module docstring): per chunk it holds, m outputs
    (the logits on the last chunk) and, but on the last chunk, m gradient receive buffers. Empty: none kept."""
    if c.pp == 1 or not ctx.stack.pp_kept_outputs:
        return ()
    last = c.chunks - 1
    logits = s.act // ctx.model.hidden_size * local_vocab(ctx.model, c.tp)  # [mb, s, V/t] in the activations' dtype
    per_chunk = [m * logits if ch == last else 2 * m * s.p2p_bytes for ch in range(c.chunks)]
    return tuple(sum(per_chunk[r :: c.pp]) for r in range(c.pp))
