"""The three intervention experiments of ``python -m sst_interp.intervene`` (library side, typed configs).

- :mod:`~sst_interp.experiments.window`: where the depth gain lives (:class:`WindowConfig`, :func:`run_window`);
- :mod:`~sst_interp.experiments.trace`: causal tracing across depths (:class:`TraceConfig`, :func:`run_trace`);
- :mod:`~sst_interp.experiments.steer`: steering the halt (:class:`SteerConfig`, :func:`run_steer`);
- :mod:`~sst_interp.experiments.setup`: the model and questions loaded once, each condition an ordinary run;
- :mod:`~sst_interp.experiments.manifest`: the tables and ``experiment-<kind>.json`` an experiment folder holds.
"""
