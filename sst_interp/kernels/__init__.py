"""Floor 1, the shared kernels: what every other package may import and what imports nothing above it.

- :mod:`~sst_interp.kernels.errors`: the error contract (``UsageError`` -> one ``error:`` line and exit 2);
- :mod:`~sst_interp.kernels.paper`: the paper's constants (thresholds, seeds, eq:alpha);
- :mod:`~sst_interp.kernels.outcomes`: per-question correctness across depths (the label rules build on it);
- :mod:`~sst_interp.kernels.results`: the result types every measurement returns (``AnalysisResult``,
  ``NotApplicable``);
- :mod:`~sst_interp.kernels.stats`: the statistics (binomial, McNemar, Wilson/Clopper-Pearson, bootstrap, Fisher);
- :mod:`~sst_interp.kernels.owned`: hook ownership (``OwnedHooks``: every hook removed on exit);
- :mod:`~sst_interp.kernels.fields`: config fields declared once with their default, help and command-line form
  (``arg``; the command layer builds each parser from them);
- :mod:`~sst_interp.kernels.lazy`, :mod:`~sst_interp.kernels.paths`, :mod:`~sst_interp.kernels.processes`: lazy
  package exports, path and process helpers.

Nothing is imported here, so importing one kernel loads only that module (``owned`` needs torch, ``stats`` scipy).
"""
