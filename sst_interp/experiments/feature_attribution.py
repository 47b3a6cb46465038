"""Attribution patching at feature level: each active feature's first-order effect on the answer at one site, from a
clean and a counterfactual prompt, then the top features verified by real feature patching.

The metric M and the forced prefix are attribution patching's (:mod:`sst_interp.experiments.attribution`): the
log-probability of the target token at its position (or the logit difference to a foil), read with the tokens before
it forced. The site is one ``layer_out`` state x (turn 0, a layer, position and iteration) of a dictionary trained
there; its features' activations are a = enc(x) on the clean prompt and a' = enc(x') on the counterfactual one.
Patching feature f alone (the ``feature`` operation, mode ``patch``, from the counterfactual row run alongside)
moves the state by (a'_f - a_f) W_dec[f] and keeps the reconstruction error, so to first order::

    M(f patched) - M(clean) ~= dM/dx . (a'_f - a_f) W_dec[f]

One forward and one backward pass (:func:`~sst_interp.experiments.attribution.attribution_pass`, both prompts in
one batch) give x, x' and dM/dx; every feature active in either prompt gets its estimate, and the ``verify`` largest
in magnitude are patched for real (one forced generation each, :func:`~sst_interp.experiments.attribution.
metric_values`), beside patching them all at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from sst_interp.experiments.attribution import attribution_pass, metric_values
from sst_interp.experiments.trace import Target
from sst_interp.interventions import Intervention, InterventionSpec, Operation, Site
from sst_interp.interventions.feature_edits import FeatureDictionary
from sst_interp.kernels.errors import UsageError
from sst_interp.model.generation import GenerationConfig

#: The columns of :func:`feature_attribution`, one row per feature active in either prompt, largest estimate first.
FEATURE_ATTRIBUTION_COLUMNS = ("feature", "clean_activation", "counterfactual_activation", "estimate", "real")
#: Row names of the two prompts in the attribution batch (the counterfactual is the live patch source, row 1).
ROWS = ("clean", "counterfactual")


def feature_spec(dictionary: str | Path, features: Sequence[int], layer: int, position: int,
                 iteration: int) -> InterventionSpec:
    """Patch ``features`` at one ``layer_out`` site (turn 0) from the counterfactual row (row 1)."""
    site = Site("layer_out", layers=(layer,), positions=(position,), iterations=(iteration,), turns=(0,))
    operation = Operation("feature", dictionary=str(dictionary), features=tuple(features), mode="patch", source=1)
    return InterventionSpec((Intervention(site, operation),))


def feature_attribution(sst: Any, dictionary: str | Path, clean: list[int], counterfactual: list[int],
                        target: Target, depth: int, config: GenerationConfig, layer: int, position: int,
                        iteration: int, verify: int = 5, foil: int | None = None) -> pd.DataFrame:
    """First-order feature patching effects at (``layer``, ``position``, ``iteration``), the top ``verify`` checked
    by real patching (module docstring).

    Args:
        sst: the model (an SST or a natively looping family; float weights, or quantised with LoRA).
        dictionary: the dictionary folder (trained at this layer and iteration, on this model's states).
        clean: the clean prompt's token ids.
        counterfactual: the counterfactual prompt's token ids.
        target: where M is read and the token it reads (its prefix is forced in both prompts).
        depth: iterations per position.
        config: generation options (prompt mode, padding, EOS).
        layer, position, iteration: the site (turn 0; ``position`` at or before the target's).
        verify: how many features, largest |estimate| first, to patch for real.
        foil: a token whose logit M subtracts (None: M is the target's log-probability).

    Returns:
        :data:`FEATURE_ATTRIBUTION_COLUMNS`, one row per feature active in either prompt, sorted by |estimate|
        (nats, or logit units with a foil): ``real`` is M(patched) - M(clean) for the verified ones (NaN for the
        others); a last row with ``feature`` -1 patches the verified features together (its estimate the sum).
        ``attrs["clean_metric"]`` is M of the clean prompt.
    """
    loaded = FeatureDictionary.load(dictionary)
    site = feature_spec(dictionary, [0], layer, position, iteration).interventions[0]
    loaded.check_fits(site, int(sst.hidden_size), "feature attribution")
    prompts, targets, foils = [clean, counterfactual], [target, target], [foil, foil]
    gradients = attribution_pass(sst, prompts, targets, depth, config, question_ids=list(ROWS), layers=[layer],
                                 foils=foils)
    key = (position, iteration, layer)
    if key not in gradients.grads:
        raise UsageError(f"feature attribution: no gradient at (position, iteration, layer) = {key}; the site must be "
                         f"at or before the target's position {target.position}, at an iteration <= {depth}")
    states, grad = gradients.states[key], gradients.grads[key][0]
    activations = loaded.encode(states.float()).double()
    change = activations[1] - activations[0]
    active = ((activations[0] != 0) | (activations[1] != 0)).nonzero()[:, 0]
    directions = loaded.directions(tuple(int(f) for f in active), torch.device("cpu")).double()
    estimates = change[active] * (directions @ grad)
    order = torch.argsort(estimates.abs(), descending=True)
    rows = [{"feature": int(active[i]), "clean_activation": float(activations[0, active[i]]),
             "counterfactual_activation": float(activations[1, active[i]]), "estimate": float(estimates[i]),
             "real": float("nan")} for i in order.tolist()]
    base = metric_values(sst, prompts, targets, depth, config, None, list(ROWS), foils)[0]
    chosen = rows[:verify]
    for row in chosen:
        spec = feature_spec(dictionary, [row["feature"]], layer, position, iteration)
        row["real"] = float(metric_values(sst, prompts, targets, depth, config, spec, list(ROWS), foils)[0] - base)
    if chosen:
        spec = feature_spec(dictionary, [row["feature"] for row in chosen], layer, position, iteration)
        together = float(metric_values(sst, prompts, targets, depth, config, spec, list(ROWS), foils)[0] - base)
        rows.append({"feature": -1, "clean_activation": float("nan"), "counterfactual_activation": float("nan"),
                     "estimate": float(np.sum([row["estimate"] for row in chosen])), "real": together})
    frame = pd.DataFrame(rows, columns=list(FEATURE_ATTRIBUTION_COLUMNS))
    frame.attrs["clean_metric"] = float(base)
    return frame
