"""Training data made on the spot, deterministic by seed, with a difficulty we know.

Why synthetic rather than shipped: calibration runs on clusters without internet and in CI, so the
data must need no download and no file; and the staleness study (experiments.staleness_accuracy) needs tasks whose
difficulty is *known*, so an accuracy penalty can be told apart from a task that is simply too
hard or too easy.

- :class:`ImageTask`: image classification. Each class has a smooth random prototype (a coarse
  ``4x4`` grid of random values, upsampled bilinearly to ``image_size``); a sample is its class's
  prototype plus i.i.d. Gaussian pixel noise of standard deviation ``noise``, circularly shifted
  by up to ``max_shift`` pixels. Convolutions can learn it (translation), the linear Bayes rate
  is high but below 100% when noise is large, and ``noise`` dials the difficulty.
- :class:`TokenTask`: next-token prediction on sequences drawn from a random first-order Markov
  chain over ``vocab`` tokens (each row a Dirichlet draw with concentration ``concentration``).
  The lowest achievable cross-entropy is the chain's entropy rate and the best achievable
  accuracy is the stationary expectation of each row's largest probability; both are computed
  exactly (:meth:`TokenTask.entropy_rate_nats`, :meth:`TokenTask.bayes_accuracy`), so a learning
  curve can be read against the optimum.

Batches are a pure function of ``(seed, step, shard)``: a run resumed at step ``k`` sees the same
data as an uninterrupted one, and ``shard``/``num_shards`` give data-parallel workers disjoint
slices of the same global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["Batch", "ImageTask", "TokenTask"]

Batch = tuple[torch.Tensor, torch.Tensor]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)


@dataclass(frozen=True, slots=True)
class ImageTask:
    """Classification of noisy, shifted class prototypes (see the module docstring)."""

    seed: int = 0
    num_classes: int = 10
    image_size: int = 16
    channels: int = 3
    noise: float = 1.0
    max_shift: int = 2
    test_size: int = 512

    def prototypes(self) -> torch.Tensor:
        coarse = torch.randn(self.num_classes, self.channels, 4, 4, generator=_generator(self.seed))
        size = (self.image_size, self.image_size)
        return F.interpolate(coarse, size=size, mode="bilinear", align_corners=False)

    def _sample(self, count: int, gen: torch.Generator) -> Batch:
        labels = torch.randint(0, self.num_classes, (count,), generator=gen)
        images = self.prototypes()[labels].clone()
        images += self.noise * torch.randn(images.shape, generator=gen)
        shifts = torch.randint(-self.max_shift, self.max_shift + 1, (count, 2), generator=gen)
        for i in range(count):
            dy, dx = int(shifts[i, 0]), int(shifts[i, 1])
            images[i] = torch.roll(images[i], shifts=(dy, dx), dims=(1, 2))
        return images, labels

    def train_batch(self, step: int, batch: int, shard: int = 0, num_shards: int = 1) -> Batch:
        """Worker ``shard``'s ``batch`` samples of global step ``step``."""
        gen = _generator(self.seed * 1_000_003 + step * 7919 + 1)
        images, labels = self._sample(batch * num_shards, gen)
        part = slice(shard * batch, (shard + 1) * batch)
        return images[part], labels[part]

    def test_set(self) -> Batch:
        """The held-out split: drawn from a stream no training step uses."""
        return self._sample(self.test_size, _generator(self.seed * 1_000_003 - 1))

    def sample_shape(self) -> tuple[int, ...]:
        return (self.channels, self.image_size, self.image_size)


@dataclass(frozen=True, slots=True)
class TokenTask:
    """Next-token prediction on a random Markov chain (see the module docstring)."""

    seed: int = 0
    vocab: int = 64
    seq_len: int = 32
    concentration: float = 0.1
    test_size: int = 128

    def _matrix(self) -> torch.Tensor:
        """Row ``i``: the distribution of the token after token ``i`` (float64)."""
        rng = np.random.default_rng(self.seed)
        rows = rng.dirichlet(np.full(self.vocab, self.concentration), size=self.vocab) + 1e-12
        return torch.from_numpy(rows / rows.sum(axis=1, keepdims=True))

    def stationary(self) -> torch.Tensor:
        matrix = self._matrix()
        dist = torch.full((self.vocab,), 1.0 / self.vocab, dtype=torch.float64)
        for _ in range(2000):
            dist = dist @ matrix
        return dist

    def entropy_rate_nats(self) -> float:
        """The lowest cross-entropy any model can reach on this task (nats per token)."""
        matrix = self._matrix()
        row_entropy = -(matrix * matrix.log()).sum(dim=1)
        return float(self.stationary() @ row_entropy)

    def bayes_accuracy(self) -> float:
        """The best next-token accuracy any model can reach (always predicting the likeliest)."""
        return float(self.stationary() @ self._matrix().max(dim=1).values)

    def _sample(self, count: int, gen: torch.Generator) -> Batch:
        matrix = self._matrix().float()
        tokens = torch.empty(count, self.seq_len + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, self.vocab, (count,), generator=gen)
        for t in range(self.seq_len):
            tokens[:, t + 1] = torch.multinomial(matrix[tokens[:, t]], 1, generator=gen).squeeze(1)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def train_batch(self, step: int, batch: int, shard: int = 0, num_shards: int = 1) -> Batch:
        gen = _generator(self.seed * 1_000_003 + step * 7919 + 1)
        inputs, targets = self._sample(batch * num_shards, gen)
        part = slice(shard * batch, (shard + 1) * batch)
        return inputs[part], targets[part]

    def test_set(self) -> Batch:
        return self._sample(self.test_size, _generator(self.seed * 1_000_003 - 1))

    def sample_shape(self) -> tuple[int, ...]:
        return (self.seq_len,)
