"""An interactive explorer of one run in the browser: one question at a time, every iteration.

Modules: :mod:`~sst_interp.explore.config` (:class:`ExploreConfig`), :mod:`~sst_interp.explore.source` (the run,
re-opened as a recording commits), :mod:`~sst_interp.explore.listing` (the question list and its filters),
:mod:`~sst_interp.explore.question` (transcripts and token summaries), :mod:`~sst_interp.explore.position` (overlap,
regime, L2, logit lens at one position), :mod:`~sst_interp.explore.attention` (each recorded head's attention at
one position and iteration), :mod:`~sst_interp.explore.halting` (a probe's scores),
:mod:`~sst_interp.explore.server` (the Starlette app) and :mod:`~sst_interp.explore.serve` (binding, uvicorn).
The command is ``python -m sst_interp.explore RUN`` (:mod:`sst_interp.cli.explore`).
"""
