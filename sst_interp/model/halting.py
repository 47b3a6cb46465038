"""Per-position halting rules: after each iteration at a generated position, decide
between emitting the token and iterating again, up to a maximum depth.

A policy string (``--depth-policy``) is a comma-separated list of rules and bounds::

    kl:0.01,max=4            entropy:2.5,min=2,max=6        state:0.05        kl:0.01,margin:0.9,max=4

Rules (a rule "fires" for a row after iteration i; the position halts when any rule fires, once i >= min):

- ``kl:TAU``: KL(p_i || p_{i-1}) < TAU between the next-token distributions of the last two iterations (Huginn);
- ``entropy:TAU``: entropy of p_i (nats) < TAU;
- ``margin:TAU``: top-1 minus top-2 probability of p_i > TAU (CALM's confidence exit);
- ``state:TAU``: ||s_i - s_{i-1}|| / ||s_{i-1}|| < TAU for the carried state stream s of the last stateful layer
  (needs no LM head);
- ``probe-pos:PATH``: a saved halting probe (``python -m sst_interp.probe train``) applied to each position's
  output of its layer after each iteration; halts where its logit exceeds the probe's saved threshold. The model
  package does not load probes: the caller attaches it with :meth:`PositionPolicy.with_probe` (``record`` does).

``kl`` and ``state`` compare two iterations, so they cannot fire at iteration 1; a policy made only of such
rules runs at least 2 iterations (:attr:`PositionPolicy.min_depth` is that effective minimum). Comparisons are
strict, so ``kl:0`` / ``entropy:0`` / ``state:0`` / ``margin:1`` never fire (fixed depth ``max``), and ``kl:inf``
always fires as soon as it can (fixed depth ``min``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from sst_interp.kernels.errors import UsageError

RULES: tuple[str, ...] = ("kl", "entropy", "margin", "state", "probe-pos")
PAIRWISE: frozenset[str] = frozenset({"kl", "state"})  # rules that compare iteration i with i - 1
LOGIT_RULES: frozenset[str] = frozenset({"kl", "entropy", "margin"})


@dataclass(frozen=True)
class IterationSignals:
    """What the rules read after iteration ``iteration`` at one position, for the B rows of a batch.

    Args:
        iteration: 1-based iteration that just ran.
        logits: [B, V] next-token logits of this iteration (None when no rule needs them).
        prev_logits: [B, V] logits of the previous iteration (None at iteration 1 or when not needed).
        state: [B, d] carried state of the last stateful layer after this iteration (None when not needed).
        prev_state: [B, d] the same after the previous iteration.
        hidden: [B, d] output of the probe layer at this position after this iteration (``probe-pos`` only).
    """

    iteration: int
    logits: torch.Tensor | None = None
    prev_logits: torch.Tensor | None = None
    state: torch.Tensor | None = None
    prev_state: torch.Tensor | None = None
    hidden: torch.Tensor | None = None


def relative_change(state: torch.Tensor, prev_state: torch.Tensor) -> torch.Tensor:
    """||s - s_prev|| / ||s_prev|| per row of [B, d] states, [B] float64.

    Computed from the states rounded to float32 (what a run's hidden shards store) so that an offline simulation
    over recorded states reproduces the live values; a zero previous state makes any change infinite.
    """
    now, prev = state.float().double(), prev_state.float().double()
    change, base = (now - prev).norm(dim=-1), prev.norm(dim=-1)
    inf = torch.full_like(change, math.inf)
    return torch.where(base > 0, change / torch.where(base > 0, base, torch.ones_like(base)),
                       torch.where(change > 0, inf, torch.zeros_like(change)))


def entropy_from_logprobs(logprobs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of [B, V] float32 log-probs, [B] float32: the formula of the logits shard's ``entropy``
    column (:func:`sst_interp.hooks.logits.logit_summary`), so the recorded column is the live value."""
    probs = logprobs.exp()
    return -torch.where(probs > 0, probs * logprobs, torch.zeros_like(probs)).sum(-1)


def margin_from_top2(top_logprobs: torch.Tensor) -> torch.Tensor:
    """Top-1 minus top-2 probability from [B, >=2] float32 log-probs sorted descending, [B] float32."""
    probs = top_logprobs[:, :2].exp()
    return probs[:, 0] - probs[:, 1]


def kl_from_logprobs(logprobs: torch.Tensor, prev_logprobs: torch.Tensor) -> torch.Tensor:
    """KL(p || p_prev) of [B, V] float32 log-probs over the full vocabulary, [B] float64 (clamped at 0)."""
    lp, prev = logprobs.double(), prev_logprobs.double()
    return (lp.exp() * (lp - prev)).sum(-1).clamp_min(0.0)


def rule_values(name: str, signals: IterationSignals) -> torch.Tensor:
    """The quantity rule ``name`` thresholds, [B] (see the module docstring). Log-probs are float32
    ``log_softmax`` of the logits, as the logits shard records them, so a simulation from a recorded run reads the
    same numbers."""
    if name == "state":
        if signals.state is None or signals.prev_state is None:
            raise ValueError("the state rule needs this and the previous iteration's state")
        return relative_change(signals.state, signals.prev_state)
    if signals.logits is None:
        raise ValueError(f"the {name} rule needs this iteration's logits")
    logprobs = torch.log_softmax(signals.logits.float(), dim=-1)
    if name == "entropy":
        return entropy_from_logprobs(logprobs)
    if name == "margin":
        return margin_from_top2(logprobs.topk(2, dim=-1).values)
    if name == "kl":
        if signals.prev_logits is None:
            raise ValueError("the kl rule needs the previous iteration's logits")
        return kl_from_logprobs(logprobs, torch.log_softmax(signals.prev_logits.float(), dim=-1))
    raise ValueError(f"unknown rule {name!r}")


def rule_fires(name: str, tau: float, values: torch.Tensor) -> torch.Tensor:
    """[B] bool: where rule ``name`` with threshold ``tau`` fires on its ``values`` (strict comparisons)."""
    return values > tau if name == "margin" else values < tau


@dataclass(frozen=True)
class PositionPolicy:
    """A per-position depth policy: iterate each generated position until a rule fires, between min and max.

    Args:
        rules: ((name, tau), ...) in the order written; a position halts when any fires.
        min_iterations: the written ``min=`` (default 1).
        max_depth: ``max=``: no position runs more iterations.
        probe_path: the ``probe-pos:PATH`` of the string (None without one).
        probe_layer: the layer the attached probe reads (set by :meth:`with_probe`).
        probe_fn: the attached probe: [B, d] probe-layer output -> [B] bool, True where it halts.
    """

    rules: tuple[tuple[str, float], ...]
    min_iterations: int
    max_depth: int
    probe_layer: int | None = None
    per_position: bool = True
    probe_path: str | None = None
    probe_fn: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None, compare=False, repr=False)

    def with_probe(self, probe_fn: Callable[[torch.Tensor], torch.Tensor], layer: int) -> PositionPolicy:
        """This policy with its ``probe-pos`` probe attached (``probe_fn`` reads the output of ``layer``)."""
        return replace(self, probe_fn=probe_fn, probe_layer=int(layer))

    @property
    def min_depth(self) -> int:
        """The fewest iterations a position can run: ``min=``, or 2 when every rule compares two iterations."""
        pairwise_only = self.probe_path is None and all(name in PAIRWISE for name, _ in self.rules)
        return min(self.max_depth, max(self.min_iterations, 2 if pairwise_only else 1))

    @property
    def needs_logits(self) -> bool:
        return any(name in LOGIT_RULES for name, _ in self.rules)

    @property
    def needs_state(self) -> bool:
        return any(name == "state" for name, _ in self.rules)

    def halt(self, signals: IterationSignals, batch: int, device: torch.device) -> torch.Tensor:
        """[B] bool: which rows emit their token after ``signals.iteration``."""
        i = signals.iteration
        if i >= self.max_depth:
            return torch.ones(batch, dtype=torch.bool, device=device)
        fired = torch.zeros(batch, dtype=torch.bool, device=device)
        if i < self.min_depth:
            return fired
        for name, tau in self.rules:
            if name in PAIRWISE and i < 2:
                continue
            fired |= rule_fires(name, tau, rule_values(name, signals)).to(device)
        if self.probe_path is not None:
            if self.probe_fn is None or signals.hidden is None:
                raise RuntimeError("probe-pos needs its probe attached (PositionPolicy.with_probe) and the probe "
                                   "layer's output")
            fired |= self.probe_fn(signals.hidden).to(device=device, dtype=torch.bool).reshape(-1)
        return fired

    def should_halt(self, iteration: int, hidden: torch.Tensor | None) -> bool:
        """The per-turn :class:`~sst_interp.model.depth_policy.DepthPolicy` call; a per-position policy is driven
        through :meth:`halt` instead, so generation never asks this."""
        raise RuntimeError("a per-position policy decides through halt(), at every position")

    def describe(self) -> str:
        """The canonical policy string (e.g. ``kl:0.01,min=1,max=4``): manifests and run identities."""
        parts = [f"{name}:{tau!r}" for name, tau in self.rules]  # repr: the exact threshold, round-tripping
        if self.probe_path is not None:
            parts.append(f"probe-pos:{self.probe_path}")
        return ",".join([*parts, f"min={self.min_iterations}", f"max={self.max_depth}"])


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--depth-policy: {what} must be a number, got {text!r}") from None
    return value


def parse_position_policy(text: str, default_max: int) -> PositionPolicy:
    """Parse a per-position policy string (see the module docstring); bad strings are a :class:`UsageError`.

    ``default_max`` is the maximum depth when the string has no ``max=`` (``record`` passes max(--depths)).
    """
    rules: list[tuple[str, float]] = []
    bounds: dict[str, int] = {}
    probe: str | None = None
    example = "e.g. kl:0.01,max=4"
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise UsageError(f"--depth-policy {text!r} has an empty item; {example}")
        if "=" in item:
            key, _, value = item.partition("=")
            key = key.strip()
            if key not in ("min", "max"):
                raise UsageError(f"--depth-policy: unknown bound {key!r} in {text!r}; use min= or max=")
            if key in bounds:
                raise UsageError(f"--depth-policy: {key}= given twice in {text!r}")
            if not value.strip().isdigit() or int(value) < 1:
                raise UsageError(f"--depth-policy: {key}= must be an integer >= 1, got {value!r}")
            bounds[key] = int(value)
            continue
        name, sep, value = item.partition(":")
        name = name.strip()
        if name == "probe-pos" and sep:
            if probe is not None:
                raise UsageError(f"--depth-policy: probe-pos given twice in {text!r}")
            if not value.strip() or not Path(value.strip()).exists():
                raise UsageError(f"--depth-policy probe-pos:{value.strip()}: no such probe; train one with "
                                 f"python -m sst_interp.probe train --run RUN")
            probe = str(Path(value.strip()).resolve())
            continue
        if name not in RULES or not sep:
            raise UsageError(f"--depth-policy: unknown rule {item!r}; use {', '.join(r + ':TAU' for r in RULES)}, "
                             f"min=, max= ({example}), fixed, or probe:PATH")
        tau = _number(value.strip(), f"{name}'s threshold")
        if math.isnan(tau) or tau < 0:
            raise UsageError(f"--depth-policy: {name}'s threshold must be >= 0, got {value.strip()!r}")
        if any(name == seen for seen, _ in rules):
            raise UsageError(f"--depth-policy: rule {name!r} given twice in {text!r}")
        rules.append((name, tau))
    if not rules and probe is None:
        raise UsageError(f"--depth-policy {text!r} names no rule; {example}")
    maximum = bounds.get("max", default_max)
    if maximum < 1:
        raise UsageError(f"--depth-policy: max must be at least 1, got {maximum}")
    minimum = bounds.get("min", 1)
    if minimum > maximum:
        raise UsageError(f"--depth-policy: min={minimum} exceeds max={maximum}")
    return PositionPolicy(rules=tuple(rules), min_iterations=minimum, max_depth=maximum, probe_path=probe)


def is_position_policy(text: str) -> bool:
    """Whether ``text`` is meant as a per-position policy (not ``fixed`` and not ``probe:PATH``)."""
    return text != "fixed" and not text.startswith("probe:")
