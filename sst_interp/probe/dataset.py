"""Probe inputs read from a run: labelled timesteps and the halting-evaluation states.

Which hidden state a timestep reads (``app:halting_training``, ``app:halting_eval``): the
paper's probe "inspects the position-0 hidden state at layer 15 after each iteration of the
recurrence", and the labels come from the flat-depth generations. Here:

* the **training timestep** (question ``q``, turn ``t``, depth ``d``) is the generated
  position 0 of turn ``t`` in the flat depth-``d`` generation, at the probe layer, after
  iteration ``d`` (the last iteration of that position at that depth). Turn ``t`` of the flat
  depth-``d`` generation is the turn the model produces when run at depth ``d``, which is what
  happens under the halting policy once it has chosen ``d`` (the depth then holds);
* the **evaluation state** of question ``q`` at iteration ``d`` is position 0 of the first turn
  of the flat depth-``d`` generation after iteration ``d``. Prefill is depth-independent,
  so this is exactly the state a depth-``i_max`` generation has at
  iteration ``d`` of position 0, i.e. what :class:`~sst_interp.probe.policy.ProbeDepth` sees
  at generation time; reading it from the depth-``d`` shard keeps training and evaluation on
  the same recorded values. For the first turn the training timestep at depth ``d`` and the
  evaluation state at iteration ``d`` are the same vector.

Streaming: only position 0 at one layer is read (``run.hidden(..., positions=[0], layers=[layer])``),
one (question, turn) block at a time; the result is ``[n_timesteps, d]`` plus ``[Q, i_max, d]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sst_interp.analyses.layers import paper_layer
from sst_interp.analyses.loop_manifest import declared_state_layer
from sst_interp.kernels.errors import UsageError
from sst_interp.probe.labels import HaltLabels, check_depths, labels_from_generations

#: The paper's probe layer (of 62), ``sec:halting_probe_method``.
PAPER_PROBE_LAYER = 15


@dataclass(frozen=True)
class ProbeData:
    """Everything the probe analyses need at one layer.

    Args:
        layer: the probe layer (0-based decoder layer whose output is read).
        labels: the labelled timesteps (:class:`HaltLabels`); ``x`` rows follow ``labels.timesteps``.
        x: ``[n_timesteps, d]`` float32 training inputs.
        eval_x: ``[Q, i_max, d]`` float32: first-turn position-0 state after iteration ``d``
            (index ``d - 1``) for every question of ``labels.correct`` (same order).
        source: provenance (run path, identity) stored with a trained probe.
    """

    layer: int
    labels: HaltLabels
    x: np.ndarray
    eval_x: np.ndarray
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n, q = len(self.labels.timesteps), len(self.labels.correct)
        if self.x.ndim != 2 or self.x.shape[0] != n:
            raise UsageError(f"x must be [n_timesteps={n}, d], got {self.x.shape}")
        if self.eval_x.shape[:2] != (q, self.labels.i_max) or self.eval_x.shape[2] != self.x.shape[1]:
            raise UsageError(f"eval_x must be [Q={q}, i_max={self.labels.i_max}, d], got {self.eval_x.shape}")

    @property
    def y(self) -> np.ndarray:
        """``[n_timesteps]`` bool: True for MUST HALT."""
        return self.labels.timesteps["must_halt"].to_numpy(dtype=bool)

    @property
    def groups(self) -> np.ndarray:
        """``[n_timesteps]`` question id of each timestep (the LOOCV group)."""
        return self.labels.timesteps["question_id"].to_numpy()

    @property
    def hidden_size(self) -> int:
        """``d``."""
        return int(self.x.shape[1])

    @property
    def correct(self) -> np.ndarray:
        """``[Q, i_max]`` bool question-level correctness at flat depth ``d`` (index ``d - 1``)."""
        return self.labels.correct.to_numpy(dtype=bool)

    @property
    def question_ids(self) -> list[str]:
        """Question ids in evaluation order."""
        return [str(q) for q in self.labels.correct.index]


def run_layer_default(num_layers: int) -> int:
    """The paper's layer 15 of 62 at the same depth fraction of a ``num_layers`` model."""
    return paper_layer(PAPER_PROBE_LAYER, num_layers)


def load_probe_data(run: Any, layer: int | None = None) -> ProbeData:
    """Labels and position-0 states of a :class:`~sst_interp.store.Run` at one layer.

    Args:
        run: an open run with flat depths ``1..i_max``.
        layer: probe layer (0-based); default: the paper's layer 15 of 62 scaled to the run's depth (a
            latent-iteration family's run: its declared state layer, ``loop.state_layer``).

    Returns:
        :class:`ProbeData` (``x: [n_timesteps, d]``, ``eval_x: [Q, i_max, d]``).
    """
    if layer is None:
        # a latent-iteration family's layers need not loop: its probe reads the carried state by default
        declared = declared_state_layer(run.manifest)
        layer = run_layer_default(run.num_layers) if declared is None else declared
    layer = int(layer)
    return load_probe_data_layers(run, [layer])[layer]


def load_probe_data_layers(run: Any, layers: list[int]) -> dict[int, ProbeData]:
    """:func:`load_probe_data` for several layers in one pass over the hidden shards.

    Returns ``{layer: ProbeData}``; memory is ``len(layers) x (n_timesteps + Q x i_max) x d`` floats.
    """
    i_max = check_depths(run.depths)
    if i_max < 2:
        raise UsageError("halting labels need flat depths 1..i_max with i_max >= 2; record --depths 1,2,3,4")
    layers = sorted({int(v) for v in layers})
    bad = [v for v in layers if not 0 <= v < run.num_layers]
    if not layers or bad:
        raise UsageError(f"layers {bad or layers} are outside the run's layers 0..{run.num_layers - 1}")
    qids = list(run.question_ids())  # complete at every depth, questions.parquet order
    if not qids:
        raise UsageError(f"no question of {run.path} is complete at every depth {run.depths}; finish recording")
    gens = run.generations()
    gens = gens[gens["question_id"].isin(qids) & gens["depth"].isin(run.depths)]
    labels = labels_from_generations(gens, qids)
    d = int(run.hidden_size)
    ts = labels.timesteps
    first_turn = gens.groupby(["question_id", "depth"])["turn"].min()
    keys = zip(ts["question_id"], ts["turn"], ts["depth"])
    row_of_ts = {(q, int(t), int(dd)): i for i, (q, t, dd) in enumerate(keys)}
    q_index = {q: i for i, q in enumerate(qids)}
    x = np.full((len(layers), len(ts), d), np.nan, dtype=np.float32)
    eval_x = np.full((len(layers), len(qids), i_max, d), np.nan, dtype=np.float32)
    for depth in range(1, i_max + 1):
        for block in run.hidden(depth, question_ids=qids, layers=layers, positions=[0]):
            q, t = str(block.question_id), int(block.turn)
            train_row = row_of_ts.get((q, t, depth))
            is_first = q in q_index and int(first_turn.get((q, depth), -1)) == t
            if train_row is None and not is_first:
                continue
            states = _position0_states(block, depth, layers, run.path)
            if train_row is not None:
                x[:, train_row] = states
            if is_first:
                eval_x[:, q_index[q], depth - 1] = states
    out = {}
    for li, layer in enumerate(layers):
        _require_filled(x[li], ts, eval_x[li], qids, run.path, layer)
        source = {"run": str(run.path), "identity": run.manifest.get("identity", {}), "layer": layer}
        out[layer] = ProbeData(layer=layer, labels=labels, x=x[li], eval_x=eval_x[li], source=source)
    return out


def _position0_states(block: Any, depth: int, layers: list[int], path: Any) -> np.ndarray:
    """``[len(layers), d]`` states after iteration ``depth`` at position 0 from one HiddenBlock."""
    pos = np.flatnonzero(np.asarray(block.positions) == 0)
    it = np.flatnonzero(np.asarray(block.iterations) == depth)
    block_layers = [int(v) for v in np.asarray(block.layers)]
    missing = [v for v in layers if v not in block_layers]
    if not (len(pos) and len(it)) or missing:
        raise UsageError(
            f"{path}: question {block.question_id!r} turn {block.turn} at depth {depth} has no hidden state at "
            f"position 0, iteration {depth}, layers {missing or layers}; re-record the run "
            "(position 0 is always recorded in full)"
        )
    li = [block_layers.index(v) for v in layers]
    return np.asarray(block.values[pos[0], it[0]][li], dtype=np.float32)


def _require_filled(x: np.ndarray, ts: Any, eval_x: np.ndarray, qids: list[str], path: Any, layer: int) -> None:
    missing = np.flatnonzero(np.isnan(x).all(axis=1)) if len(x) else np.array([], dtype=np.int64)
    if len(missing):
        r = ts.iloc[int(missing[0])]
        raise UsageError(
            f"{path}: no position-0 hidden state at layer {layer} for question {r['question_id']!r} turn "
            f"{r['turn']} depth {r['depth']} ({len(missing)} timesteps missing); re-record those questions"
        )
    empty = np.isnan(eval_x).all(axis=2)
    if empty.any():
        qi, di = (int(v[0]) for v in np.nonzero(empty))
        raise UsageError(
            f"{path}: no first-turn position-0 hidden state at layer {layer} for question {qids[qi]!r} at depth "
            f"{di + 1}; re-record that question"
        )
