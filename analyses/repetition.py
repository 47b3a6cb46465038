"""Sentence repetition and loops (paper tab:repetition, sec:output_stability).

Inputs are generations tables (docs/format.md columns plus ``text``) or :class:`~sst_interp.store.Run` objects
(their ``generations()`` is read), one per configuration: a flat depth (:func:`select_depth`), what staged compute
would deploy (:func:`select_staged`), or a matched baseline's generations.

Definitions:

- Sentence repetition: per model turn, the fraction of sentences (at least 20 characters) that occur more than
  once in that turn, averaged over the question's turns.
- Loops: turns whose text ends in a block repeated several times (see :class:`LoopConfig`; the paper does not
  define its loop detector, so this one is ours).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sst_interp.analyses import tidy
from sst_interp.analyses.measurement import Measurement
from sst_interp.kernels import stats
from sst_interp.analyses.evaluation import load_generations
from sst_interp.kernels.results import AnalysisResult, NotApplicable
from sst_interp.kernels.errors import UsageError
from sst_interp.kernels.outcomes import correctness_matrix, staged_depth


_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after ``.``, ``!`` or ``?`` followed by whitespace, and at newlines."""
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s.strip()]


def sentence_repetition(text: str, min_chars: int = 20) -> float:
    """Fraction of sentences of at least ``min_chars`` characters whose text occurs more than once.

    Counted over sentence occurrences: ``A. A. B.`` (all long) gives 2/3. A turn with no sentence
    that long has no repetition (0.0).
    """
    sentences = [s for s in split_sentences(text) if len(s) >= min_chars]
    if not sentences:
        return 0.0
    counts: dict[str, int] = {}
    for s in sentences:
        counts[s] = counts.get(s, 0) + 1
    return sum(1 for s in sentences if counts[s] > 1) / len(sentences)


@dataclass(frozen=True)
class LoopConfig:
    """When a turn counts as a loop: its text ends in one block repeated back to back.

    Args:
        min_repeats: consecutive copies of the block at the end of the text.
        min_span_chars: the repeated tail must cover at least this many characters.
        max_period_chars: longest block length tried.
    """

    min_repeats: int = 3
    min_span_chars: int = 100
    max_period_chars: int = 400


def has_loop(text: str, config: LoopConfig | None = None) -> bool:
    """True when ``text`` (trailing whitespace ignored) ends in a block repeated per ``config``."""
    config = config or LoopConfig()
    s = text.rstrip()
    for period in range(1, min(config.max_period_chars, len(s) // config.min_repeats) + 1):
        tail = s[-period * config.min_repeats:]
        if tail[period:] != tail[:-period]:
            continue
        start = len(s) - period * config.min_repeats
        while start > 0 and s[start - 1] == s[start - 1 + period]:
            start -= 1
        if len(s) - start >= config.min_span_chars:
            return True
    return False


def select_depth(generations: Any, depth: int) -> pd.DataFrame:
    """Rows of one flat depth (all turns)."""
    df = load_generations(generations)
    if depth not in set(df["depth"]):
        raise UsageError(f"depth {depth} is not in the run (depths {sorted(set(df['depth']))})")
    return df[df["depth"] == depth]


def select_staged(generations: Any) -> pd.DataFrame:
    """Rows staged compute would deploy: each question at its staged depth (first correct, else the deepest)."""
    df = load_generations(generations)
    choice = staged_depth(correctness_matrix(df))
    keyed = df[df["question_id"].isin(choice.index)]
    return keyed[keyed["depth"].to_numpy() == choice.loc[keyed["question_id"]].to_numpy()]


@dataclass(frozen=True)
class Repetition(AnalysisResult):
    """tab:repetition: per-question sentence repetition and loops for each configuration.

    Args:
        configurations: names in table order.
        per_question: for each configuration, the per-question repetition (mean over turns) ``[N]``.
        loops: for each configuration, questions with at least one looping turn.
        reference: the configuration the Mann-Whitney p-values compare against (or None).
    """

    label = "tab:repetition"
    configurations: tuple[str, ...]
    per_question: tuple[np.ndarray, ...]
    loops: tuple[int, ...]
    reference: str | None = None

    def table(self) -> pd.DataFrame:
        """Columns: configuration, N, sentence_repetition (%), loops, mann_whitney_p (vs the reference)."""
        ref = None if self.reference is None else self.per_question[self.configurations.index(self.reference)]
        out = []
        for name, values, loops in zip(self.configurations, self.per_question, self.loops):
            row: dict[str, Any] = {"configuration": name, "N": len(values),
                                   "sentence_repetition": 100.0 * float(values.mean()), "loops": loops}
            if ref is not None and name != self.reference:
                same = np.concatenate([ref, values])
                row["mann_whitney_p"] = 1.0 if np.all(same == same[0]) else stats.mann_whitney(ref, values).pvalue
            out.append(row)
        return pd.DataFrame(out)


def repetition(
    configurations: Mapping[str, pd.DataFrame],
    reference: str | None = None,
    min_chars: int = 20,
    loop: LoopConfig | None = None,
) -> Repetition | NotApplicable:
    """Sentence repetition and loops (tab:repetition) for ``{name: generations rows}``.

    Each value holds the model turns of one configuration (e.g. ``select_depth(run, 1)``,
    ``select_staged(run)``, or a baseline run's generations) and needs a ``text`` column.
    """
    loop = loop or LoopConfig()
    if not configurations:
        raise UsageError("pass at least one configuration {name: generations rows}")
    if reference is not None and reference not in configurations:
        raise UsageError(f"reference {reference!r} is not one of {list(configurations)}")
    names, values, loops = [], [], []
    for name, rows in configurations.items():
        if "text" not in rows.columns or "question_id" not in rows.columns:
            raise UsageError(f"{name}: rows need question_id and text columns")
        if rows.empty:
            return NotApplicable(f"{name}: no generations", Repetition.label)
        per_turn = rows.assign(
            _rep=[sentence_repetition(t or "", min_chars) for t in rows["text"]],
            _loop=[has_loop(t or "", loop) for t in rows["text"]],
        )
        grouped = per_turn.groupby("question_id", sort=False)
        names.append(str(name))
        values.append(grouped["_rep"].mean().to_numpy(float))
        loops.append(int(grouped["_loop"].any().sum()))
    return Repetition(tuple(names), tuple(values), tuple(loops), reference)


# ------------------------------------------------------------------------------------------------ entry
def _repetition(a: Any) -> Any:
    gens = a.run.generations()
    depths = sorted(a.run.depths)
    configs: dict[str, pd.DataFrame] = {}
    if a.baseline is not None:
        configs[f"Baseline iter={a.baseline_depth}"] = select_depth(a.baseline.generations(), a.baseline_depth)
    configs[f"SST flat iter={depths[0]}"] = select_depth(gens, depths[0])
    if len(depths) >= 2:
        configs["SST staged"] = select_staged(gens)
        configs[f"SST flat iter={depths[-1]}"] = select_depth(gens, depths[-1])
    return repetition(configs, reference=next(iter(configs)))


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(name="repetition", label="tab:repetition", title="Sentence-level repetition and loops per "
                "configuration.", requires=(), compute=_repetition,
                tidy=lambda r: tidy.renamed(r.table(), {"N": "n_turns", "sentence_repetition":
                                                        "sentence_repetition_pct"}),
                columns={"configuration": "baseline, SST flat or staged", "n_turns": "model turns",
                         "sentence_repetition_pct": "turns with a repeated sentence", "loops": "turns in a loop",
                         "mann_whitney_p": "against the first configuration"}),
)
