"""``python -m sst_interp.features attribute``: :func:`~sst_interp.experiments.feature_attribution.
feature_attribution` on prompts given as text, with the model the dictionary was trained on.

The dictionary's sidecar names the site (its layer and iterations) and the model: a dictionary trained ``--live`` on
an organism names the organism (rebuilt as it was trained on: its weights, or its initial ones under the recorded
seed for an ``--untrained`` control), and one trained on a recorded run of a natively looping family names that run,
whose model ``evaluate --splice`` loads too (:func:`~sst_interp.features.splice.load_family_model`). The prompts are
tokenised as the hops experiments tokenise them (``tokenizer(prompt)["input_ids"]``: the organism's
:func:`~sst_interp.organism.tokenizer.hops_tokenizer`, a family's own tokenizer). M is read at the first answer token
(position 0, nothing forced before it): by default M = logit(the counterfactual's greedy answer) - logit(the clean
prompt's), the quantity patching from the counterfactual moves.

Every refusal that needs no model (the dictionary folder, its layer and iterations, the flags' ranges, the output
path) comes before the model is loaded; none writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sst_interp.experiments.feature_attribution import feature_attribution, feature_spec
from sst_interp.experiments.hops_patching import answers
from sst_interp.experiments.trace import Target
from sst_interp.features.live_train import load_organism
from sst_interp.features.meta import DictionaryMeta, read_meta
from sst_interp.features.options import AttributeOptions
from sst_interp.features.splice import load_family_model
from sst_interp.interventions.feature_edits import FeatureDictionary
from sst_interp.kernels.errors import UsageError
from sst_interp.model.devices import check_device
from sst_interp.model.generation import GenerationConfig
from sst_interp.organism.tokenizer import hops_tokenizer
from sst_interp.outputs import write_output
from sst_interp.store import Run

#: Where M is read: the first answer token (the organism answers in one token), with no forced prefix.
TARGET_POSITION = 0


@dataclass(frozen=True)
class Attribution:
    """What ``attribute`` computed: the table (``attrs["clean_metric"]`` is M of the clean prompt), the target and
    foil as token strings, and the CSV written (None without ``--out``)."""

    table: pd.DataFrame
    target: str
    foil: str
    out: Path | None


def load_model(meta: DictionaryMeta, model: str | None, device: str) -> tuple[Any, Any]:
    """The model a dictionary was trained on (``model`` when given), and its tokenizer (module docstring)."""
    if meta.source:
        if model is not None:
            loaded, _, _ = load_organism(model, device=device)
        else:  # exactly the model the states came from (the --untrained control's initial weights included)
            loaded, _, _ = load_organism(str(meta.source["model"]), bool(meta.source.get("untrained", False)),
                                         int(meta.source.get("seed", 0)), device)
        return loaded, hops_tokenizer()
    family = str(meta.model.get("family", "sst"))
    if family == "sst":
        raise UsageError(f"attribute reruns natively looping models (the organisms, HRM-Text and the other families); "
                         f"the dictionary was trained on an SST run ({meta.run}): call sst_interp.experiments."
                         f"feature_attribution.feature_attribution on the loaded SST instead")
    return load_family_model(Run.open(meta.run), model, device)


def token_id(tokenizer: Any, text: str, flag: str) -> int:
    """The id of token string ``text`` (a vocabulary entry, or text that tokenises to exactly one token); a
    UsageError naming ``flag`` otherwise."""
    vocabulary = tokenizer.get_vocab()
    if text in vocabulary:
        return int(vocabulary[text])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise UsageError(f"{flag} {text!r} is {len(ids)} tokens of this model's tokenizer, not one; pass a single "
                         f"token (a token string of its vocabulary, such as an answer digit)")
    return int(ids[0])


def _check(options: AttributeOptions, meta: DictionaryMeta, folder: Path, layer: int, depth: int) -> None:
    """The refusals that need no model (module docstring)."""
    if options.position < 0 or options.position > TARGET_POSITION:
        raise UsageError(f"--position {options.position} is beyond the target's position {TARGET_POSITION} (the "
                         f"first answer token): the site must be at or before it")
    if options.verify < 0:
        raise UsageError(f"--verify must be >= 0, got {options.verify}")
    if depth < 1:
        raise UsageError(f"--depth must be >= 1, got {depth}")
    if not 1 <= options.iteration <= depth:
        raise UsageError(f"--iteration {options.iteration} is outside 1-{depth} (--depth {depth})")
    if options.out is not None and options.out.is_dir():
        raise UsageError(f"--out {options.out} is a folder; pass a CSV file path")
    if options.out is not None and not options.out.parent.is_dir():
        raise UsageError(f"--out {options.out}: its folder {options.out.parent} does not exist; create it first")
    # the check feature_attribution makes again against the model's width, here before the model is loaded
    site = feature_spec(folder, [0], layer, options.position, options.iteration).interventions[0]
    FeatureDictionary.load(folder).check_fits(site, meta.d_in, "attribute")


def attribute_features(options: AttributeOptions) -> Attribution:
    """Run ``attribute`` (module docstring): the feature attribution table, written to ``options.out`` if given."""
    device = check_device(options.device)
    folder = Path(options.dictionary)
    meta = read_meta(folder)
    layer = meta.layer if options.layer is None else options.layer
    depth = max(meta.iterations) if options.depth is None else options.depth
    _check(options, meta, folder, layer, depth)
    model, tokenizer = load_model(meta, options.model, device)
    prompts = [tokenizer(prompt)["input_ids"] for prompt in (options.clean, options.counterfactual)]
    target, foil = options.target, options.foil
    if target is None or foil is None:
        clean_answer, counterfactual_answer = answers(model, tokenizer, [options.clean, options.counterfactual], depth,
                                                      None)
        target = counterfactual_answer if target is None else target
        foil = clean_answer if foil is None else foil
    target_id, foil_id = token_id(tokenizer, target, "--target"), token_id(tokenizer, foil, "--foil")
    if target_id == foil_id:
        raise UsageError(f"the target and the foil are the same token {target!r}, so M is 0 whatever is patched; "
                         f"pass a counterfactual the model answers differently, or --target/--foil")
    config = GenerationConfig(max_new_tokens=1, pad_token_id=int(tokenizer.pad_token_id or 0))
    table = feature_attribution(model, folder, prompts[0], prompts[1], Target("clean", TARGET_POSITION, target_id, ()),
                                depth, config, layer, options.position, options.iteration, options.verify, foil_id)
    if options.out is not None:
        write_output(options.out, table.to_csv(index=False))
    return Attribution(table, target, foil, options.out)
