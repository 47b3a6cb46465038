"""Architectural ablations (app:ablations): SST runs of different architectures on the same questions.

What a run is comes from its manifest, never from its name (:func:`classify`): whether it has SST layers (the
``sst`` block's ``layers``: ``[]`` is the matched baseline, LoRA only, no state stream), whether it loaded a
checkpoint (``identity.checkpoint``; none: an untrained SST, such as the demo preset), its state scale and its
update rule and ``theta_init`` (the ``sst`` block that ``record`` writes from the model it ran; else the
checkpoint's ``sst_config.json``). A manifest without an ``sst`` block is of **unknown kind** and is never guessed.
Of the trained SSTs with a state stream in every layer and the paper's unit state scale:

- **main**: ``theta_init = -1.8`` (the paper's) and the ``direct`` state update;
- **alpha_init** (tab:alpha_init_ablation): the ``direct`` update with another ``theta_init`` (``train --theta-init
  0``: the unbiased initialisation, alpha = sigma(0) of the range);
- **ema_variant** (tab:ema_variant_ablation): the ``ema_linked`` update at the paper's ``theta_init``;
- anything else (a hidden state scale, a subset of layers) is **other**. Beside them: **baseline** (no SST layer),
  **untrained** (no checkpoint) and **unknown**; none of these is a main run or a variant.

A variant is compared with the main run recorded under the same conditions: the same questions (ids and question
data), protocol, prompt mode, token budget and depths. Runs given together that differ in any of these are bad
input (:func:`pair_runs` raises a one-line :class:`~sst_interp.kernels.errors.UsageError` naming the difference).

Definitions (paper app:ablations; staged compute as in :mod:`sst_interp.kernels.outcomes`):

- the accuracy "at iter = i" of a run is its staged capacity through stage ``i``: questions correct at some flat
  depth ``<= i`` (the paper's main-SST row, 51.01 / 56.57 / 57.58 / 61.11%, is tab:staged_breakdown's);
- the deltas are the variant's accuracy minus the main SST's, and minus the matched baseline's (its single depth),
  in percentage points;
- McNemar: exact two-sided test (:func:`sst_interp.kernels.stats.mcnemar_exact`) on the paired flips at each stage
  (questions the variant answers and the reference misses, and the reverse); p = 1 with no discordant pair.
- Only questions recorded at every depth of both runs (and by the baseline, when given) enter; N is reported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.kernels import stats
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix
from sst_interp.kernels.paper import THETA_INIT
from sst_interp.kernels.results import AnalysisResult, NotApplicable

MAIN, ALPHA_INIT, EMA_VARIANT, OTHER = "main", "alpha_init", "ema_variant", "other"
#: roles of runs that are no SST of the paper's tables: no state stream, no checkpoint, no SST config
BASELINE, UNTRAINED, UNKNOWN = "baseline", "untrained", "unknown"
#: The paper label of each variant role's table.
LABELS = {ALPHA_INIT: "tab:alpha_init_ablation", EMA_VARIANT: "tab:ema_variant_ablation"}
#: How each variant is trained (said in a requirement's reason).
HOW = {ALPHA_INIT: "python -m sst_interp.train --theta-init 0 (the unbiased initialisation)",
       EMA_VARIANT: "python -m sst_interp.train --update ema_linked"}
#: the state scale of the paper's SST (``hidden`` is the demo preset's, see sst_interp.model.SSTConfig)
PAPER_STATE_SCALE = "unit"


@dataclass(frozen=True)
class Architecture:
    """What a recorded run or a training is, as far as the ablations and the run labels care.

    Args:
        theta_init: initial blend logit.
        update: ``direct`` or ``ema_linked``.
        state_scale: ``unit`` (the paper) or ``hidden`` (the demo preset).
        layers: the SST layers; None: every layer (the paper); ``()``: none (the matched baseline, LoRA only).
        trained: whether a checkpoint was loaded (False: an untrained SST, such as the demo preset).
    """

    theta_init: float
    update: str
    state_scale: str = PAPER_STATE_SCALE
    layers: tuple[int, ...] | None = None
    trained: bool = True

    @property
    def role(self) -> str:
        """main, alpha_init, ema_variant, other (a combination no paper table compares), baseline (no SST layer) or
        untrained (no checkpoint)."""
        if self.layers == ():
            return BASELINE
        if not self.trained:
            return UNTRAINED
        if self.state_scale != PAPER_STATE_SCALE or self.layers is not None:
            return OTHER
        paper_theta = abs(self.theta_init - THETA_INIT) < 1e-9
        if self.update == "direct":
            return MAIN if paper_theta else ALPHA_INIT
        if self.update == "ema_linked" and paper_theta:
            return EMA_VARIANT
        return OTHER

    def describe(self) -> str:
        """``theta_init=-1.8, direct update``, with what departs from the paper's SST added: the state scale, the
        layers, ``untrained``; ``no state stream`` for the baseline."""
        if self.layers == ():
            return "no state stream" + ("" if self.trained else ", untrained")
        parts = [f"theta_init={self.theta_init:g}", f"{self.update} update"]
        if self.state_scale != PAPER_STATE_SCALE:
            parts.append(f"state_scale={self.state_scale}")
        if self.layers is not None:
            parts.append(f"SST layers {list(self.layers)}")
        if not self.trained:
            parts.append("untrained")
        return ", ".join(parts)

    def label(self) -> str:
        """How a table names a run of this kind: ``SST (theta_init=-1.8, direct update)``, ``untrained SST (...)``,
        ``matched baseline (LoRA only, no state stream)`` or ``backbone (no state stream, untrained)``."""
        if self.layers == ():
            return ("matched baseline (LoRA only, no state stream)" if self.trained
                    else "backbone (no state stream, untrained)")
        return f"{'untrained ' if not self.trained else ''}SST ({self.describe()})"


#: how a table names a run whose manifest cannot say what it is
UNKNOWN_LABEL = "unknown kind (the manifest holds no SST config)"


def architecture(run: Any) -> Architecture | None:
    """What the run is, from its manifest (module docstring): the ``sst`` block, else its checkpoint's
    ``sst_config.json``, with ``identity.checkpoint`` saying whether it was trained. None when the manifest cannot
    say (no SST config, or no ``identity.checkpoint`` entry): the run is of unknown kind, never guessed."""
    manifest = run.manifest
    identity = manifest.get("identity")
    if not isinstance(identity, dict) or "checkpoint" not in identity:
        return None
    block = manifest.get("sst")
    named = identity.get("checkpoint")
    if not isinstance(block, dict):
        file = Path(named) / "sst_config.json" if named else None
        block = json.loads(file.read_text()).get("sst") if file is not None and file.is_file() else None
    if not isinstance(block, dict) or "theta_init" not in block:
        return None
    layers = block.get("layers")
    # a synthetic run stands for the SST its ``sst`` block plants (the test fixtures' trained runs): no checkpoint
    # file exists for it to name
    trained = bool(named) or identity.get("model") == "synthetic"
    return Architecture(float(block["theta_init"]), str(block.get("update", "direct")),
                        str(block.get("state_scale", PAPER_STATE_SCALE)),
                        None if layers is None else tuple(int(x) for x in layers), trained)


def role_of(run: Any) -> str:
    """The run's role (:attr:`Architecture.role`), or :data:`UNKNOWN` when its manifest cannot say."""
    arch = architecture(run)
    return UNKNOWN if arch is None else arch.role


def run_label(run: Any) -> str:
    """How a table names the run: :meth:`Architecture.label`, or :data:`UNKNOWN_LABEL`."""
    arch = architecture(run)
    return UNKNOWN_LABEL if arch is None else arch.label()


def _conditions(run: Any) -> dict[str, Any]:
    manifest = run.manifest
    identity = manifest.get("identity") or {}
    decoding = manifest.get("decoding")
    budget = decoding.get("max_new_tokens") if isinstance(decoding, dict) else identity.get("max_new_tokens")
    return {"protocol": str(manifest.get("protocol", "completion")), "prompt mode": manifest.get("prompt_mode"),
            "max new tokens": budget, "depths": sorted(int(d) for d in run.depths)}


def _question_ids(run: Any) -> set[str]:
    return {str(q) for q in run.questions()["question_id"]}


def difference(a: Any, b: Any) -> str | None:
    """What differs between the recording conditions of runs ``a`` and ``b`` (one phrase), or None."""
    qa, qb = _question_ids(a), _question_ids(b)
    if qa != qb:
        only_a, only_b = sorted(qa - qb), sorted(qb - qa)
        first = (only_a or only_b)[0]
        return (f"questions ({len(qa)} vs {len(qb)}, {len(qa & qb)} shared; {first!r} is only in "
                f"{'the first' if only_a else 'the second'})")
    sha_a = (a.manifest.get("identity") or {}).get("data_sha256")
    sha_b = (b.manifest.get("identity") or {}).get("data_sha256")
    if sha_a and sha_b and sha_a != sha_b:
        return "question data (same ids, different content: data_sha256 differs)"
    ca, cb = _conditions(a), _conditions(b)
    for key in ca:
        if ca[key] != cb[key]:
            return f"{key} ({ca[key]} vs {cb[key]})"
    return None


@dataclass(frozen=True)
class AblationPairs:
    """The variant runs of an ablation set and the main run each is compared with.

    Args:
        roles: run name -> role (main, alpha_init, ema_variant, other, baseline, untrained; absent: the manifest
            cannot say, the run is of unknown kind).
        architectures: run name -> its :class:`Architecture`.
        pairs: role -> (variant run name, main run name).
    """

    roles: dict[str, str]
    architectures: dict[str, Architecture]
    pairs: dict[str, tuple[str, str]]

    def listing(self) -> str:
        """The runs and their settings, for a requirement's reason."""
        return "; ".join(f"{name} ({arch.describe()})" for name, arch in self.architectures.items()) or "none"


def pair_runs(runs: Mapping[str, Any]) -> AblationPairs:
    """Find each variant's main run among ``runs`` (name -> Run).

    Raises:
        UsageError: a variant and the main run differ in questions, protocol, prompt mode, token budget or depths
            (the line names the difference), or a pairing is ambiguous (two main runs of the same questions, or two
            variants of one role for one main run).
    """
    archs = {name: a for name, a in ((n, architecture(r)) for n, r in runs.items()) if a is not None}
    roles = {name: arch.role for name, arch in archs.items()}
    mains = [n for n, role in roles.items() if role == MAIN]
    pairs: dict[str, tuple[str, str]] = {}
    if not mains:
        return AblationPairs(roles, archs, pairs)
    for name, role in roles.items():
        if role not in LABELS:
            continue
        matching = [m for m in mains if difference(runs[m], runs[name]) is None]
        if not matching:
            closest = max(mains, key=lambda m: len(_question_ids(runs[m]) & _question_ids(runs[name])))
            raise UsageError(f"ablation run {name} ({archs[name].describe()}) and the main SST run {closest} differ "
                             f"in {difference(runs[closest], runs[name])}; record both on the same questions, "
                             f"protocol and depths")
        if len(matching) > 1:
            raise UsageError(f"ablation run {name} matches two main SST runs ({', '.join(matching)}) recorded under "
                             f"the same conditions; pass one of them")
        if role in pairs:
            raise UsageError(f"two {role} ablation runs ({pairs[role][0]}, {name}) given; pass one per table")
        pairs[role] = (name, matching[0])
    return AblationPairs(roles, archs, pairs)


# ------------------------------------------------------------------------------------------------ the table
def _staged(matrix: pd.DataFrame) -> np.ndarray:
    """``[questions, depths]`` bool: correct at some depth <= each stage."""
    return np.logical_or.accumulate(matrix.to_numpy(bool), axis=1)


def _p(b: int, c: int) -> float:
    return 1.0 if b + c == 0 else stats.mcnemar_exact(b, c).pvalue


@dataclass(frozen=True)
class AblationTable(AnalysisResult):
    """tab:alpha_init_ablation or tab:ema_variant_ablation.

    Args:
        role: alpha_init or ema_variant.
        main: the main SST's settings; variant: the variant's.
        n: questions compared.
        depths: the stages (the runs' depths, ascending).
        main_correct: ``[n, stages]`` bool staged correctness of the main SST; variant_correct: the variant's.
        baseline_correct: ``[n]`` bool of the matched baseline at ``baseline_depth``, or None without one.
        baseline_depth: the baseline run's depth.
        shown: the stages the paper's layout shows (every stage; the EMA table shows the first two and the last).
    """

    role: str
    main: Architecture
    variant: Architecture
    n: int
    depths: tuple[int, ...]
    main_correct: np.ndarray
    variant_correct: np.ndarray
    baseline_correct: np.ndarray | None
    baseline_depth: int | None
    shown: tuple[int, ...]

    @property
    def label(self) -> str:  # type: ignore[override]
        return LABELS[self.role]

    def stages(self) -> pd.DataFrame:
        """One row per stage: accuracies (%), deltas (pp), paired flips and exact McNemar p against the main SST
        and the baseline (NaN without one)."""
        rows = []
        base = self.baseline_correct
        for j, depth in enumerate(self.depths):
            v, m = self.variant_correct[:, j], self.main_correct[:, j]
            row: dict[str, Any] = {
                "stage": depth, "n_questions": self.n,
                "main_accuracy_pct": 100.0 * m.mean(), "variant_accuracy_pct": 100.0 * v.mean(),
                "baseline_accuracy_pct": np.nan if base is None else 100.0 * base.mean(),
                "delta_vs_main_pp": 100.0 * (v.mean() - m.mean()),
                "variant_only_vs_main": int((v & ~m).sum()), "main_only": int((m & ~v).sum()),
                "mcnemar_exact_p_vs_main": _p(int((v & ~m).sum()), int((m & ~v).sum())),
                "delta_vs_baseline_pp": np.nan, "variant_only_vs_baseline": np.nan, "baseline_only": np.nan,
                "mcnemar_exact_p_vs_baseline": np.nan,
            }
            if base is not None:
                b, c = int((v & ~base).sum()), int((base & ~v).sum())
                row.update(delta_vs_baseline_pp=100.0 * (v.mean() - base.mean()), variant_only_vs_baseline=b,
                           baseline_only=c, mcnemar_exact_p_vs_baseline=_p(b, c))
            rows.append(row)
        return pd.DataFrame(rows)

    def table(self) -> pd.DataFrame:
        """The paper's layout: one column per shown stage (``iter=i``, the last ``staged i_max=D``), rows the main
        SST, the variant, the matched baseline (its accuracy under the stage of its depth), the deltas and the
        McNemar statistics."""
        stages = self.stages().set_index("stage").loc[list(self.shown)]
        top = max(self.depths)
        columns = [f"staged i_max={d}" if d == top else f"iter={d}" for d in self.shown]
        variant_name = "Linked blend EMA variant" if self.role == EMA_VARIANT else "SST (no bias)" \
            if abs(self.variant.theta_init) < 1e-12 else "SST (variant)"
        rows: list[tuple[str, list[float]]] = [
            (f"SST ({self.main.describe()})", list(stages["main_accuracy_pct"])),
            (f"{variant_name} ({self.variant.describe()})", list(stages["variant_accuracy_pct"])),
        ]
        if self.baseline_correct is not None:
            at = [100.0 * self.baseline_correct.mean() if d == self.baseline_depth else np.nan for d in self.shown]
            rows.append((f"Matched fine-tuned baseline (iter={self.baseline_depth})", at))
        rows += [("Delta vs SST (pp)", list(stages["delta_vs_main_pp"])),
                 ("variant right, SST wrong", list(stages["variant_only_vs_main"])),
                 ("SST right, variant wrong", list(stages["main_only"])),
                 ("McNemar exact p vs SST", list(stages["mcnemar_exact_p_vs_main"]))]
        if self.baseline_correct is not None:
            rows += [("Delta vs baseline (pp)", list(stages["delta_vs_baseline_pp"])),
                     ("variant right, baseline wrong", list(stages["variant_only_vs_baseline"])),
                     ("baseline right, variant wrong", list(stages["baseline_only"])),
                     ("McNemar exact p vs baseline", list(stages["mcnemar_exact_p_vs_baseline"]))]
        frame = pd.DataFrame([[name, *values] for name, values in rows], columns=["condition", *columns])
        for column in columns:
            frame[column] = frame[column].astype(float)
        return frame


def ablation_table(role: str, main: Any, variant: Any, baseline: Any | None = None,
                   baseline_depth: int | None = None) -> AblationTable | NotApplicable:
    """The ablation table of ``variant`` (role alpha_init or ema_variant) against ``main`` (Runs recorded under the
    same conditions; see :func:`pair_runs`), with the matched ``baseline`` run at ``baseline_depth`` (default: its
    smallest depth) when given."""
    label = LABELS[role]
    main_arch, variant_arch = architecture(main), architecture(variant)
    if main_arch is None or variant_arch is None:
        return NotApplicable("a run's manifest holds no SST config (theta_init, update)", label)
    m, v = correctness_matrix(main), correctness_matrix(variant)
    if list(m.columns) != list(v.columns):
        return NotApplicable(f"the runs have depths {list(m.columns)} and {list(v.columns)}", label)
    common = [q for q in m.index if q in v.index]
    base_vector = None
    if baseline is not None:
        b = correctness_matrix(baseline)
        depth = baseline_depth if baseline_depth is not None else int(min(b.columns))
        base_vector = b[depth]
        common = [q for q in common if q in base_vector.index]
    if not common:
        return NotApplicable("the runs share no question recorded at every depth", label)
    depths = tuple(int(d) for d in m.columns)
    if len(depths) < 2:
        return NotApplicable(f"the runs have a single depth ({depths[0]}); staged compute needs two or more", label)
    shown = depths if role == ALPHA_INIT else tuple(sorted({*depths[:2], depths[-1]}))
    return AblationTable(role, main_arch, variant_arch, len(common), depths, _staged(m.loc[common]),
                         _staged(v.loc[common]),
                         None if base_vector is None else base_vector.loc[common].to_numpy(bool),
                         None if base_vector is None else depth, shown)
