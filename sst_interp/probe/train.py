"""Training the halting probe exactly as ``app:halting_training`` describes.

Adam at lr 1e-3, batch size 32, 60 epochs, binary cross-entropy on the logit
(``BCEWithLogitsLoss``), no regularisation. Class balance: the minority class is duplicated
(cyclically) up to the majority count, then a ``WeightedRandomSampler`` (weights
``1 / class count``, with replacement, one epoch = the balanced set's size) draws equal expected
counts of each class. Seed 42: the initial weights are drawn under ``torch.manual_seed(seed)``
inside ``torch.random.fork_rng`` (the caller's global RNG is left untouched) and the sampler
uses its own ``torch.Generator`` seeded with ``seed``, so the same data give the same probe.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.utils.data import WeightedRandomSampler

from sst_interp.kernels.errors import UsageError
from sst_interp.probe.model import HaltingProbe, ProbeConfig


@dataclass(frozen=True)
class TrainConfig:
    """Probe training hyperparameters (defaults are the paper's).

    Args:
        lr: Adam learning rate.
        batch_size: minibatch size.
        epochs: passes over the balanced training set.
        seed: seeds the weight initialisation and the sampler's generator.
        threads: torch intra-op threads while training (restored afterwards); 1 by default because the
            probe is tiny and thread synchronisation would dominate (and a fixed count keeps results
            identical across machines with different core counts). Not part of the recipe.
    """

    lr: float = 1e-3
    batch_size: int = 32
    epochs: int = 60
    seed: int = 42
    threads: int = 1

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.batch_size < 1 or self.epochs < 1:
            raise UsageError(
                f"training needs lr > 0, batch_size >= 1, epochs >= 1; got {self.lr}, {self.batch_size}, {self.epochs}"
            )
        if self.threads < 1:
            raise UsageError(f"training threads must be >= 1, got {self.threads}")


@dataclass(frozen=True)
class TrainReport:
    """What a training run did (stored as the probe's training provenance).

    Args:
        n_timesteps: rows given (before balancing).
        n_positive: MUST HALT rows given.
        n_balanced: rows after duplicating the minority class (2 x majority count).
        final_loss: mean BCE over the last epoch.
        seconds: wall time.
        config: the :class:`TrainConfig` as a dict.
    """

    n_timesteps: int
    n_positive: int
    n_balanced: int
    final_loss: float
    seconds: float
    config: dict

    def to_json(self) -> dict:
        """A JSON-able dict."""
        return asdict(self)


def balance_indices(y: np.ndarray) -> np.ndarray:
    """Row indices with the minority class duplicated up to the majority count.

    ``y: [n]`` of 0/1 -> ``[2 * majority]`` int64: all majority rows, then the minority rows
    repeated cyclically (``np.resize``) to the same count. Order within a class is kept.
    """
    y = np.asarray(y).astype(bool)
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    if len(pos) == 0 or len(neg) == 0:
        raise UsageError(
            f"probe training needs both classes; got {len(pos)} MUST HALT and {len(neg)} SAFE timesteps"
        )
    major, minor = (neg, pos) if len(neg) >= len(pos) else (pos, neg)
    return np.concatenate([major, np.resize(minor, len(major))]).astype(np.int64)


def train_probe(
    x: np.ndarray,
    y: np.ndarray,
    probe_config: ProbeConfig,
    config: TrainConfig | None = None,
) -> tuple[HaltingProbe, TrainReport]:
    """Train a fresh probe.

    Args:
        x: ``[n, input_size]`` float position-0 hidden states at the probe layer.
        y: ``[n]`` bool/0-1, True for MUST HALT.
        probe_config: architecture (``input_size`` must equal ``x.shape[1]``).
        config: hyperparameters (default: the paper's).

    Returns:
        The trained probe in eval mode and a :class:`TrainReport`.
    """
    config = config or TrainConfig()
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y).astype(bool)
    if x.ndim != 2 or x.shape[0] != y.shape[0]:
        raise UsageError(f"training data must be x [n, d] and y [n]; got x {x.shape}, y {y.shape}")
    if x.shape[1] != probe_config.input_size:
        raise UsageError(f"probe input_size {probe_config.input_size} does not match the data's d = {x.shape[1]}")
    if not np.isfinite(x).all():
        raise UsageError("training hidden states contain NaN or inf; check the run's hidden shards")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _train(x, y, probe_config, config)
    finally:
        torch.set_num_threads(previous_threads)


def _train(
    x: np.ndarray, y: np.ndarray, probe_config: ProbeConfig, config: TrainConfig
) -> tuple[HaltingProbe, TrainReport]:
    start = time.perf_counter()
    idx = balance_indices(y)
    xb = torch.from_numpy(x[idx])
    yb = torch.from_numpy(y[idx].astype(np.float32))
    counts = np.bincount(y[idx].astype(np.int64), minlength=2).astype(np.float64)
    weights = torch.from_numpy((1.0 / counts)[y[idx].astype(np.int64)])
    generator = torch.Generator().manual_seed(config.seed)
    sampler = WeightedRandomSampler(weights, num_samples=len(idx), replacement=True, generator=generator)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        probe = HaltingProbe(probe_config)
    optimiser = torch.optim.Adam(probe.parameters(), lr=config.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    probe.train()
    final_loss = float("nan")
    for _ in range(config.epochs):
        # One epoch: the sampler's draws cut into consecutive batches, as a DataLoader over it would
        # (indexing the tensors directly avoids the DataLoader's per-batch overhead).
        order = torch.tensor(list(sampler), dtype=torch.long)
        total = 0.0
        for batch in order.split(config.batch_size):
            optimiser.zero_grad()
            loss = loss_fn(probe(xb[batch]), yb[batch])
            loss.backward()
            optimiser.step()
            total += float(loss.detach()) * len(batch)
        final_loss = total / len(order)
    probe.eval()
    report = TrainReport(
        n_timesteps=int(len(y)),
        n_positive=int(y.sum()),
        n_balanced=int(len(idx)),
        final_loss=final_loss,
        seconds=time.perf_counter() - start,
        config=asdict(config),
    )
    return probe, report


def probe_logits(probe: HaltingProbe, x: np.ndarray, input_mask: np.ndarray | None = None,
                 neuron_mask: np.ndarray | None = None) -> np.ndarray:
    """Halt logits of ``x: [..., input_size]`` -> ``[...]`` float32 (no gradient).

    ``input_mask: [input_size]`` and ``neuron_mask: [n]`` are passed to :meth:`HaltingProbe.forward`.
    """
    with torch.no_grad():
        out = probe(
            torch.as_tensor(np.asarray(x, dtype=np.float32)),
            input_mask=None if input_mask is None else torch.as_tensor(np.asarray(input_mask, dtype=np.float32)),
            neuron_mask=None if neuron_mask is None else torch.as_tensor(np.asarray(neuron_mask, dtype=np.float32)),
        )
    return out.numpy()
