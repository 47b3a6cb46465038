"""The names and columns of the tables the three experiments write (a light module: the catalogue entries for
them, :mod:`sst_interp.experiments.measurements`, document their columns without loading the model stack)."""

#: questions the sign test would need for the cell's observed effect (the power is
#: :data:`sst_interp.experiments.power.TARGET_POWER`)
POWER_COLUMN = "questions_for_80pct_power"
#: ... and McNemar's exact test of the flips would need for the cell's observed broken/fixed split (it is the sign
#: test on the questions that flipped)
FLIP_POWER_COLUMN = "flips_questions_for_80pct_power"
#: the log-prob columns both tables share (:mod:`sst_interp.experiments.effects` fills them)
LOGPROB_COLUMNS = ("logprob_change_mean", "logprob_change_bound_low", "logprob_change_bound_high",
                   "logprob_change_median", "logprob_change_median_ci_low", "logprob_change_median_ci_high",
                   "logprob_sign_p", "logprob_sign_n",
                   "logprob_sign_up", "logprob_sign_p_holm", "correction", "logprob_compared", "logprob_censored",
                   POWER_COLUMN)

#: the flip rate (broken + fixed of n) and its exact interval, both tables (issue 44)
FLIP_RATE_COLUMNS = ("flip_rate_pct", "flip_rate_ci_low", "flip_rate_ci_high")

WINDOW_TABLE = "window"
WINDOW_COLUMNS = ("condition", "mode", "first_layer", "last_layer", "depth", "n_questions", "accuracy_pct",
                  "accuracy_change_pp", "accuracy_change_ci_low", "accuracy_change_ci_high", "broken", "fixed",
                  "mcnemar_exact_p", *FLIP_RATE_COLUMNS, FLIP_POWER_COLUMN, *LOGPROB_COLUMNS)

STEER_TABLE = "steer"
STEER_COLUMNS = ("condition", "direction", "scale", "depth", "n_questions", "accuracy_pct", "regressions", "recoveries",
                 "regressions_change", "recoveries_change", "broken", "fixed", "mcnemar_exact_p", *FLIP_RATE_COLUMNS,
                 FLIP_POWER_COLUMN,
                 *LOGPROB_COLUMNS, "random_logprob_change_min", "random_logprob_change_max")

TRACE_EFFECTS = "trace_effects"
TRACE_LAYER_POSITION = "trace_layer_position"
TRACE_LAYER_ITERATION = "trace_layer_iteration"
TRACE_TARGETS = "trace_targets"
TRACE_LAYER_OFFSET = "trace_layer_offset"
TRACE_LAYER_OFFSET_RESAMPLED = "trace_layer_offset_resampled"
#: the report's aligned trace rows: the question's own depth-k states patched in, or another question's (control)
PATCHED_OWN = "own"
PATCHED_RESAMPLED = "resampled"

ATTRIBUTION_EFFECTS = "attribution_effects"
ATTRIBUTION_CELLS = "attribution_cells"
ATTRIBUTION_VERIFIED = "attribution_verified"
ATTRIBUTION_TIMING = "attribution_timing"
ATTRIBUTION_VERIFIED_COLUMNS = ("layer", "position", "source_iteration", "n_questions", "estimate_mean", "real_mean",
                                "real_patching_s")
