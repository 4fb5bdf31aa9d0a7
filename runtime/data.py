"""Training batches, a pure function of (seed, step): every rank and every plan sees the same global
batch at a given step, so a run resumed under another plan continues on the same data.

- ``SyntheticTokens``: learnable seeded sequences (arithmetic progressions mod vocab with 10 %
  random tokens), so the loss visibly falls.
- ``TokenFile``: a flat numpy memmap of token ids (e.g. ``np.uint16``), random windows per step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from planner.specs.errors import MeshplanError


def _generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


class SyntheticTokens:
    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        self.vocab_size, self.seed = vocab_size, seed

    def batch(self, step: int, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = _generator(self.seed, step)
        start = torch.randint(0, self.vocab_size, (batch_size, 1), generator=g)
        stride = torch.randint(1, 8, (batch_size, 1), generator=g)
        tokens = (start + stride * torch.arange(seq_len + 1)) % self.vocab_size
        noise = torch.rand(tokens.shape, generator=g) < 0.1
        tokens = torch.where(noise, torch.randint(0, self.vocab_size, tokens.shape, generator=g), tokens)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


class TokenFile:
    def __init__(self, path: str | Path, vocab_size: int, seed: int = 0, dtype: str = "uint16") -> None:
        p = Path(path)
        if not p.is_file():
            raise MeshplanError(
                "data", f"token file {str(p)!r} does not exist", "give a flat numpy token file (np.memmap)"
            )
        try:
            self.tokens = np.memmap(p, dtype=np.dtype(dtype), mode="r")
        except (TypeError, ValueError) as exc:
            raise MeshplanError(
                "data", f"cannot map {p} as {dtype}: {exc}", "pass --data-dtype matching the file"
            ) from None
        self.vocab_size, self.seed = vocab_size, seed

    def batch(self, step: int, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(self.tokens)
        if n < seq_len + 2:
            raise MeshplanError(
                "data",
                f"the token file holds {n} tokens, fewer than seq_len + 2 = {seq_len + 2}",
                "use a longer file or a shorter seq_len",
            )
        g = _generator(self.seed, step)
        starts = torch.randint(0, n - seq_len - 1, (batch_size,), generator=g).tolist()
        rows = np.stack([np.asarray(self.tokens[s : s + seq_len + 1], dtype=np.int64) for s in starts])
        if rows.max() >= self.vocab_size:
            raise MeshplanError(
                "data",
                f"token id {int(rows.max())} ≥ the model's vocab_size {self.vocab_size}",
                "tokenize with the model's vocabulary",
            )
        tokens = torch.from_numpy(rows)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
