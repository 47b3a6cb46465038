"""The glossary: every term the report, the explorer and the API show, defined once.

Each :class:`Term` carries its definition (Markdown, with its formula or rule and the paper label it comes from) and
the paper labels of the artefacts that use it. ``docs/glossary.md`` is generated from this module when the docs are
built (``docs/hooks/glossary.py``), and the report links each artefact to its terms (:func:`terms_for`), so the
definition a reader sees is the same everywhere. Data only: importing it loads nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """One glossary entry.

    Args:
        anchor: the stable id of the entry (``docs/glossary.md#<anchor>``; ``#g-<anchor>`` in a report page).
        name: the term as the outputs show it.
        section: the glossary section it is listed under.
        definition: Markdown: the formula or rule, and the paper label or section it comes from.
        labels: paper labels (``tab:...``, ``fig:...``) of the artefacts whose captions use the term.
    """

    anchor: str
    name: str
    section: str
    definition: str
    labels: tuple[str, ...] = ()

    @property
    def plain(self) -> str:
        """The definition as plain text, for pages that do not render Markdown (the report, the explorer): links
        keep their text, code and emphasis marks go."""
        text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", self.definition)
        return text.replace("`", "").replace("*", "")


TERMS: tuple[Term, ...] = (
    Term(
        'state-stream', 'State stream', 'The model',
        ('Each decoder layer l keeps a latent state C (the *latent state cache*) per position and blends it '
         'into its post-attention hidden state h before the feed-forward network: h̃ = (1 − α_l) ⊙ h + α_l ⊙ '
         'RMSNorm(C_{t−1}) (`eq:blend`), then o = h̃ + FFN(RMSNorm(h̃)) (`eq:ffn`) and C_t = o '
         '(`eq:state_update`). Code: `sst_interp/model/state_stream.py`, `layer.py`.'),
    ),
    Term(
        'alpha', 'Blend coefficient α', 'The model',
        ('The per-layer, per-dimension blend strength α_l = α_min + (α_max − α_min) · σ(θ_l), α ∈ [0.015, '
         '0.10], θ initialised at −1.8 (`eq:alpha`, `sec:alpha`). `set_alpha` interventions override it.'),
        ('fig:alpha_quantile_ribbon', 'fig:alpha_panels_raw_full', 'fig:alpha_panels_raw_selected',
         'fig:alpha_panels_deviation_full', 'fig:alpha_panels_deviation_selected', 'fig:alpha_pca_trajectory',
         'fig:alpha_specialisation_profile', 'fig:alpha_global_stats_over_training', 'tab:precision_proof'),
    ),
    Term(
        'iteration', 'Iteration, depth', 'The model',
        ('At depth k the pass that emits a token runs k times at the same position, each iteration reading the '
         "states the previous one wrote; earlier positions' KV entries stay fixed and the current position's "
         'are overwritten (`sec:inference_iteration`). *Iteration* i is the i-th of those passes (1-based); a '
         "run's *depths* are the k values it recorded. *Flat depth* k runs every position at k iterations."),
        ('tab:main_results', 'tab:later_iter_computation'),
    ),
    Term(
        'prompt-mode', 'Prompt mode', 'The model',
        ('How the prompt is processed before generation: `two_pass` (as in training, `sec:two_pass`), '
         '`sequential` (the exact recurrence, one token at a time) or `none` (a plain transformer pass; the '
         "last prompt position's output is the first state). See [concepts](concepts.md)."),
    ),
    Term(
        'two-pass', 'Two-pass training', 'The model',
        ("Training resolves the recurrence's sequential dependency with two parallel passes: pass 1 without "
         "states, pass 2 blending pass 1's outputs shifted by one position (`sec:two_pass`, `eq:pass2_blend`); "
         'the gap to the exact recurrence is O(α²) (`eq:approx_bound`).'),
        ('fig:sst_loss_standalone', 'fig:sst_vs_baseline_loss'),
    ),
    Term(
        'baseline', 'Matched baseline', 'The model',
        ('The same backbone fine-tuned with the same data and LoRA recipe but no state stream '
         '(`sec:baseline_ft`); the comparison that attributes a gain to the architecture.'),
        ('tab:main_results', 'fig:baseline_loss_standalone', 'fig:sst_vs_baseline_loss'),
    ),
    Term(
        'top-k-overlap', 'Top-k overlap', 'Hidden-state measurements',
        ('overlap_k(u, v) = |topk(u) ∩ topk(v)| / k, where topk(x) is the set of the k dimensions with the '
         'largest |x_i| (`app:topk_overlap`). The paper uses k = 1024 of d = 5,376; other widths use k = '
         'round(d · 1024 / 5376) (Gemma 3 270M, d = 640: k = 122). 1.0 means the same most-active dimensions. '
         'Code: `analyses/overlap.py`.'),
        ('fig:overlap_heatmap', 'fig:overlap_heatmap_zoom', 'fig:layer_profile', 'fig:layer_profile_per_position',
         'fig:layer_profile_512pos', 'tab:basin_shift_activity'),
    ),
    Term(
        'gmm-crossover', 'GMM threshold, GMM crossover', 'Hidden-state measurements',
        ('A two-component Gaussian mixture (scikit-learn, seed 42, 500 iterations) fitted to every iteration-1 '
         'vs last-iteration overlap of a run; the *crossover* is the overlap at which both components have '
         'equal posterior probability (`app:gmm`; 0.976 in the paper). Each run fits its own; the explorer '
         "shows the paper's value until the run's fit is ready. Code: `analyses/basins.py`."),
        ('fig:overlap_heatmap', 'fig:overlap_heatmap_zoom', 'tab:argmax_concentration', 'tab:gap_distributions'),
    ),
    Term(
        'regime', 'Stable, low-overlap regime', 'Hidden-state measurements',
        ('A (position, layer) cell is *low-overlap* when its overlap is below the GMM crossover, *stable* '
         'otherwise; a position is low-overlap when any layer is (`sec:punctuated_equilibrium`).'),
        ('tab:argmax_concentration', 'tab:gap_distributions', 'tab:reorg_lo_all', 'tab:reorg_lo_argmax',
         'tab:reorg_st_all', 'tab:reorg_st_argmax', 'tab:later_iter_computation', 'tab:basin_shift_activity'),
    ),
    Term(
        'basin-shift', 'Basin shift', 'Hidden-state measurements',
        ('A low-overlap position: the representation reorganises across the layer stack and the output '
         'posterior moves to a different region, after which later positions stay stable in the new region '
         '(`sec:punctuated_equilibrium`, `sec:logit_dynamics` (5)). *Punctuated equilibrium* is this pattern '
         'over a sequence: stable positions punctuated by basin shifts.'),
        ('fig:layer_profile', 'fig:layer_profile_per_position', 'fig:layer_profile_512pos',
         'tab:basin_shift_activity', 'tab:later_iter_computation'),
    ),
    Term(
        'pre-divergence', 'Pre-divergence position', 'Hidden-state measurements',
        ('A position before the first argmax disagreement between the compared depth runs, where the token '
         'history is identical, so any output difference is caused by the state stream alone '
         '(`sec:punctuated_equilibrium`). Code: `analyses/divergence.py`.'),
        ('tab:causal_ordering', 'tab:argmax_concentration', 'tab:pos0_divergence', 'fig:layer_profile'),
    ),
    Term(
        'layer-profile', 'Layer profile', 'Hidden-state measurements',
        ('Overlap as a function of layer at low-overlap positions: median with IQR, p10–p90 and p5–p95 bands '
         '(`fig:layer_profile`). Code: `analyses/basin_profiles.py`.'),
        ('fig:layer_profile', 'fig:layer_profile_per_position', 'fig:layer_profile_512pos'),
    ),
    Term(
        'state-l2', 'State L2, convergence monitoring', 'Hidden-state measurements',
        ("The L2 norm of the change of a layer's hidden state between consecutive iterations; the paper shows "
         'it does not predict whether the next iteration helps (`fig:convergence_monitoring`). Code: '
         '`analyses/convergence.py`.'),
        ('fig:convergence_monitoring',),
    ),
    Term(
        'cross-run', 'Cross-run comparison', 'Logit measurements',
        ('The final-iteration outputs of two separate runs at different depths, at pre-divergence positions: '
         'the total state-stream effect, vertical and horizontal (`app:logit_methodology`).'),
        ('tab:argmax_concentration', 'tab:decision_boundary', 'tab:reorg_lo_all', 'tab:reorg_st_all'),
    ),
    Term(
        'within-run', 'Within-run comparison', 'Logit measurements',
        ('Iteration i against iteration j of one run at the same position: the local, vertical effect of more '
         'iterations alone, valid at every position (`app:logit_methodology`).'),
        ('tab:gap_distributions', 'tab:reorg_lo_argmax', 'tab:reorg_st_argmax', 'tab:later_iter_computation'),
    ),
    Term(
        'argmax-concentration', 'Argmax concentration', 'Logit measurements',
        ("The odds ratio (Fisher's exact test) of an argmax change at low-overlap against stable "
         'pre-divergence positions (`tab:argmax_concentration`; 3.82 in the paper).'),
        ('tab:argmax_concentration',),
    ),
    Term(
        'gap', 'Top-1/top-2 gap', 'Logit measurements',
        ('log p(top-1) − log p(top-2) in the lower-iteration output, in nats; an *exact tie* has gap 0 '
         '(`tab:gap_distributions`).'),
        ('tab:gap_distributions', 'tab:decision_boundary'),
    ),
    Term(
        'causal-ordering', 'Causal ordering', 'Logit measurements',
        ('Per question, whether the first low-overlap position precedes, coincides with or follows the first '
         'argmax divergence (`tab:causal_ordering`).'),
        ('tab:causal_ordering',),
    ),
    Term(
        'staged-capacity', 'Staged capacity, staged compute', 'Accuracy',
        ('Each question is tried at depth 1, then 2, …, up to i_max; the capacity at stage d is the fraction '
         'of questions solved at some flat depth ≤ d (`sec:capacity`, `tab:staged_breakdown`). It is a '
         'per-question oracle over depths, not a single deployable depth. Code: `analyses/evaluation.py`.'),
        ('tab:main_results', 'tab:staged_breakdown'),
    ),
    Term(
        'overthinking', 'Overthinking (regression) and recovery', 'Accuracy',
        ('Comparing flat depth d with flat depth 1 on the same questions: a *regression* (overthink) passes at '
         "1 and fails at d; a *recovery* fails at 1 and passes at d. McNemar's exact test on the discordant "
         'pairs (`sec:overthinking`, `tab:overthinking`).'),
        ('tab:overthinking', 'fig:overthinking_sankey'),
    ),
    Term(
        'convergent-reasoning', 'Convergent reasoning', 'Accuracy',
        ('A question correct at every depth whose texts are pairwise distinct across depths, tested against '
         'the chance rate (1/4)^4 for four-option questions (`tab:convergent_reasoning`).'),
        ('tab:convergent_reasoning',),
    ),
    Term(
        'must-halt', 'MUST HALT, SAFE', 'Halting',
        ("Labels for the halting probe. A question's *correct depth* c is its staged depth. A timestep at "
         'depth d is MUST HALT when the question passes at staged depth ≤ d and fails at flat depth d + 1; '
         'SAFE otherwise; at d = i_max it is SAFE (`sec:halting_probe_method`, `app:halting`). Code: '
         '`sst_interp/probe/labels.py`.'),
        ('tab:halting_probe', 'tab:halting_probe_per_iter', 'fig:halt_signal'),
    ),
    Term(
        'halting-probe', 'Halting probe', 'Halting',
        ('A small MLP, Linear(d, 10) → SiLU → Linear(10, 1), reading the position-0 hidden state at one layer; '
         'iteration halts when its logit exceeds log(0.3/0.7) (`sec:halting_probe_method`). Code: '
         '`sst_interp/probe/`.'),
        ('tab:halting_probe', 'tab:halting_probe_per_iter', 'tab:halting_probe_layer_sweep',
         'tab:halting_probe_ablation_sweep', 'tab:halting_probe_greedy_prune', 'tab:halting_probe_topk_sweep',
         'fig:halt_signal', 'fig:feature_position_grid'),
    ),
    Term(
        'loocv', 'LOOCV p-value', 'Halting',
        ("Leave-one-question-out cross-validation of the probe; `p_binomial` is the paper's binomial test, and "
         '`p_permutation` retrains every fold under permuted labels (`app:halting`).'),
        ('tab:halting_probe_layer_sweep',),
    ),
    Term(
        'depth-policy', 'Per-position depth policy', 'Halting',
        ('A rule that decides after every iteration of every position whether to emit or iterate again: '
         '`kl:TAU`, `entropy:TAU`, `margin:TAU`, `state:TAU`, or a probe. See [per-position depth](depth.md).'),
    ),
    Term(
        'family', 'Family, loop declaration', 'Families',
        ('How a latent-iteration model loops, declared once per family (sst_interp/model/loops.py): which decoder '
         'layers run how many times per token and in what order (its visits), what carries from one visit to the '
         'next, which loop count --depths sets, where a per-position exit can be taken, and its lens. SST, '
         'HRM-Text and Inkling-2 Loop are declared. See [model families](families.md).'),
    ),
    Term(
        'lens', 'Lens (per-iteration logits)', 'Families',
        ("The family's own head applied to the loop state after each visit, which gives a run its per-iteration "
         'logits; the manifest names the state it reads. For SST it is the model\'s output at each iteration; for '
         'Inkling-2 Loop the logits at the last pass are a logit lens, not the distribution the token was chosen '
         'from.'),
    ),
    Term(
        'site', 'Site', 'Interventions',
        ('Where an intervention acts: (turn, position, iteration, layer, stream). See '
         '[interventions](interventions.md).'),
    ),
    Term(
        'streams', 'Streams', 'Interventions',
        ('What an intervention reads or writes at a site: `state_in` (S(C_prev), the state as the blend reads '
         "it), `alpha` (the layer's α), `blended` (h̃, after the blend, before the FFN) and `layer_out` (the "
         "layer's output o, which is also the state the next pass reads)."),
    ),
    Term(
        'operations', 'Operations', 'Interventions',
        ('`zero` (the stream becomes 0), `add` (plus scale × a direction), `set_alpha` (α becomes a value), '
         '`freeze` (the carried state is not updated: the next pass reads the state this pass read), `patch` '
         '(the state recorded in another run or prompt at the same site), `mean` (the mean over a reference '
         "run's questions) and `resample` (another question's state at the same site, drawn with a seed). See "
         '[interventions](interventions.md).'),
    ),
)


def terms_for(label: str) -> list[Term]:
    """The terms an artefact with paper label ``label`` (e.g. ``"tab:overthinking"``) uses, in glossary order."""
    return [term for term in TERMS if label and label in term.labels]
