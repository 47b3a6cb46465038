"""A trained dictionary, loaded: SAELens' SAE and its sidecar, and the feature activations of a run's states.

::

    from sst_interp import features
    from sst_interp.store import Run

    dictionary = features.Dictionary.load("runs/hops/features/layer0-shared-topk")  # one folder
    dictionaries = features.DictionarySet.load("runs/hops/features/layer0-per-iteration-topk")  # or a set
    acts = dictionaries.encode_run(Run.open("runs/hops-test"), iterations=[1, 2])
    acts.rows            # one row per state: question_id, turn, position, iteration
    acts.activations     # scipy.sparse CSR [states, width] float32
    acts.tidy()          # question_id, turn, position, iteration, feature, activation: the active ones only

A dictionary encodes only the states it fits: the width it was trained on, its layer (by index and, for a family
run, by module name) and its iterations; anything else is one UsageError line saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from sae_lens import SAE

from sst_interp.features.meta import ITERATION_FOLDER, DictionaryMeta, is_dictionary, read_meta
from sst_interp.features.sites import StateSite, layer_names, resolve_site, run_identity, run_model
from sst_interp.features.states import Split, site_rows
from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run

#: The columns of :meth:`FeatureActivations.rows` and of :meth:`FeatureActivations.tidy` (plus feature, activation).
ROW_COLUMNS = ("question_id", "turn", "position", "iteration")


@dataclass(frozen=True)
class FeatureActivations:
    """Feature activations of a run's states.

    Args:
        rows: one row per state (:data:`ROW_COLUMNS`), in the order of ``activations``' rows.
        activations: [states, width] float32 CSR, the SAE's activations (zeros not stored).
    """

    rows: pd.DataFrame
    activations: sp.csr_matrix

    def tidy(self) -> pd.DataFrame:
        """One row per (state, active feature): :data:`ROW_COLUMNS`, ``feature`` (int64), ``activation``
        (float32)."""
        coo = self.activations.tocoo()
        frame = self.rows.iloc[coo.row].reset_index(drop=True)
        frame["feature"] = coo.col.astype(np.int64)
        frame["activation"] = coo.data.astype(np.float32)
        return frame


class Dictionary:
    """One trained dictionary: a SAELens SAE (``sae``) and its sidecar (``meta``). Load with :meth:`load`."""

    def __init__(self, sae: SAE, meta: DictionaryMeta, path: Path) -> None:
        self.sae, self.meta, self.path = sae, meta, path

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> Dictionary:
        """Load the dictionary in ``path`` (checked first: :func:`~sst_interp.features.meta.read_meta`) with
        ``SAE.load_from_disk``, in eval mode on ``device``."""
        path = Path(path)
        meta = read_meta(path)
        try:
            sae = SAE.load_from_disk(path, device=device)
        except (OSError, ValueError, KeyError, RuntimeError) as err:  # safetensors and SAELens' own refusals
            raise UsageError(f"{path} does not load in SAELens ({' '.join(str(err).split())[:200]}); retrain the "
                             f"dictionary") from err
        return cls(sae.eval(), meta, path)

    @property
    def width(self) -> int:
        """Features."""
        return int(self.meta.width)

    @property
    def iterations(self) -> tuple[int, ...]:
        """The iterations it covers."""
        return self.meta.iterations

    def check_states(self, states: torch.Tensor | np.ndarray) -> None:
        """Refuse states of another width (UsageError, one line)."""
        width = int(states.shape[-1])
        if width != self.meta.d_in:
            raise UsageError(f"the dictionary {self.path} was trained on states of width d = {self.meta.d_in}; "
                             f"these have d = {width}: use a dictionary of this model and site")

    @torch.no_grad()
    def encode(self, states: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Feature activations [N, width] float32 of states [N, d]."""
        self.check_states(states)
        x = torch.as_tensor(states, dtype=torch.float32, device=self.sae.device)
        return self.sae.encode(x).float()

    @torch.no_grad()
    def decode(self, activations: torch.Tensor) -> torch.Tensor:
        """States [N, d] float32 from activations [N, width]."""
        return self.sae.decode(activations.to(self.sae.device, torch.float32)).float()

    @torch.no_grad()
    def reconstruct(self, states: torch.Tensor) -> torch.Tensor:
        """The reconstruction [N, d] of states [N, d], in their dtype and device."""
        self.check_states(states)
        out = self.decode(self.encode(states))
        return out.to(device=states.device, dtype=states.dtype)

    def __repr__(self) -> str:
        m = self.meta
        return (f"Dictionary({str(self.path)!r}, {m.layout} {m.architecture}, layer {m.layer}, iterations "
                f"{list(m.iterations)}, {m.d_in} -> {m.width}, k={m.k})")


class DictionarySet:
    """The dictionaries of one site by iteration: one shared dictionary (every iteration maps to it) or a
    per-iteration set (a folder of ``iteration-N/`` dictionaries, or one such dictionary). Load with :meth:`load`."""

    def __init__(self, by_iteration: dict[int, Dictionary], path: Path) -> None:
        self.by_iteration, self.path = dict(sorted(by_iteration.items())), path
        first = next(iter(self.by_iteration.values()))
        self.meta = first.meta
        for dictionary in self.by_iteration.values():
            m = dictionary.meta
            if (m.layer, m.d_in, m.layer_name, m.depth) != (self.meta.layer, self.meta.d_in, self.meta.layer_name,
                                                            self.meta.depth):
                raise UsageError(f"{path} mixes dictionaries of different sites ({dictionary.path} is layer "
                                 f"{m.layer}, d = {m.d_in}); keep one site per folder")

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> DictionarySet:
        """A dictionary folder, or a folder of per-iteration dictionaries (``iteration-N/``)."""
        path = Path(path)
        if path.is_dir() and not is_dictionary(path):
            parts = sorted(p for p in path.iterdir() if p.is_dir() and p.name.startswith(ITERATION_FOLDER[:-2]))
            if parts:
                loaded = [Dictionary.load(p, device) for p in parts]
                return cls({i: d for d in loaded for i in d.iterations}, path)
        dictionary = Dictionary.load(path, device)
        return cls({i: dictionary for i in dictionary.iterations}, path)

    @property
    def layout(self) -> str:
        """``shared`` or ``per-iteration``."""
        return self.meta.layout

    @property
    def iterations(self) -> tuple[int, ...]:
        """Every iteration some dictionary of the set covers."""
        return tuple(self.by_iteration)

    def __getitem__(self, iteration: int) -> Dictionary:
        try:
            return self.by_iteration[int(iteration)]
        except KeyError:
            raise UsageError(f"{self.path} has no dictionary for iteration {iteration} (it covers "
                             f"{list(self.iterations)})") from None

    def site(self, run: Run, layer: int | None = None, iterations: Sequence[int] | None = None) -> StateSite:
        """The site of ``run`` these dictionaries read, checked: UsageError (one line) when the run's states are of
        another width, the layer is another than the dictionaries' (``layer``, or by module name in a family run),
        the model family differs, an iteration is one no dictionary covers, or the run lacks the states."""
        m = self.meta
        if layer is not None and int(layer) != m.layer:
            raise UsageError(f"{self.path} was trained on layer {m.layer}, not layer {layer}: train a dictionary at "
                             f"that site")
        if run.hidden_size != m.d_in:
            raise UsageError(f"{self.path} was trained on states of width d = {m.d_in}; {run.path} holds d = "
                             f"{run.hidden_size}: use a dictionary of this model")
        family = run_model(run)["family"]
        if family != m.model.get("family"):
            raise UsageError(f"{self.path} was trained on a {m.model.get('family')} run; {run.path} is a {family} run")
        names = layer_names(run)
        name = names[m.layer] if names is not None and m.layer < len(names) else None
        if name != m.layer_name:
            raise UsageError(f"{self.path} was trained on layer {m.layer} = {m.layer_name}; in {run.path} layer "
                             f"{m.layer} is {name}: another site")
        wanted = list(self.iterations) if iterations is None else sorted({int(i) for i in iterations})
        uncovered = [i for i in wanted if i not in self.by_iteration]
        if uncovered:
            raise UsageError(f"{self.path} covers iterations {list(self.iterations)} of layer {m.layer}, not "
                             f"{uncovered}: train a dictionary for them")
        return resolve_site(run, m.layer, wanted, m.depth if m.depth in run.depths else None)

    def split_for(self, run: Run) -> Split:
        """The held-out questions when ``run`` is the training run (same identity), else all of them."""
        if run_identity(run) == self.meta.run_identity:
            return Split("heldout", self.meta.holdout, self.meta.seed)
        return Split("all")

    def encode_run(self, run: Run | str | Path, iterations: Sequence[int] | None = None, layer: int | None = None,
                   split: Split | None = None, question_ids: Sequence[str] | None = None) -> FeatureActivations:
        """The feature activations of ``run``'s states at these dictionaries' site, per (question, turn, position,
        iteration), streamed a shard file at a time.

        Args:
            run: a Run or its path.
            iterations: the iterations to encode (default every one covered); one not covered is refused.
            layer: the layer asked for (default the dictionaries'; another is refused).
            split: which questions (default all; :meth:`split_for` gives the held-out ones of the training run).
            question_ids: only these questions.
        """
        run = run if isinstance(run, Run) else Run.open(run)
        site = self.site(run, layer, iterations)
        frames, blocks = [], []
        wanted = None if question_ids is None else {str(q) for q in question_ids}
        for part in site_rows(run, site, split or Split(), question_ids=wanted):
            for iteration in np.unique(part.iteration):
                at = part.iteration == iteration
                acts = self[int(iteration)].encode(part.values[at]).cpu().numpy()
                blocks.append(sp.csr_matrix(acts))
                frames.append(pd.DataFrame({"question_id": part.question_id[at].astype(str), "turn": part.turn[at],
                                            "position": part.position[at], "iteration": part.iteration[at]}))
        width = self.meta.width
        if not blocks:
            return FeatureActivations(pd.DataFrame({c: pd.Series(dtype=object if c == "question_id" else np.int64)
                                                    for c in ROW_COLUMNS}), sp.csr_matrix((0, width), dtype=np.float32))
        return FeatureActivations(pd.concat(frames, ignore_index=True),
                                  sp.vstack(blocks, format="csr").astype(np.float32))

    def __repr__(self) -> str:
        return f"DictionarySet({str(self.path)!r}, {self.layout}, iterations {list(self.iterations)})"

