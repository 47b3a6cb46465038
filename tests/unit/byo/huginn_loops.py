"""The loop declaration of the toy Huginn-style model, as a researcher writes it in their own file and passes with
``record --model FOLDER --loop huginn_loops.py:TOY_HUGINN`` (docs/bring-your-own.md)."""

from sst_interp.model.loops import looped_block

TOY_HUGINN = looped_block(
    family="toy_huginn",
    # every layer, in the order one pass runs them: prelude, the core (looped), coda
    layers=lambda c: ([f"prelude.{i}" for i in range(c.n_prelude)] + [f"core_block.{i}" for i in range(c.n_core)]
                      + [f"coda.{i}" for i in range(c.n_coda)]),
    looped=lambda c: (c.n_prelude, c.n_prelude + c.n_core),
    depth_key="mean_recurrence",  # the config field the model reads its repeat count from
    norm="ln_f",
    head="lm_head",
    carries="the core's output s; each repeat reads adapter([s, prelude output])",
)
