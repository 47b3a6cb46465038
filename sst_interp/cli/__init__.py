"""The command layer: one module per command, all built on :mod:`sst_interp.cli.args`.

- ``record`` (``python -m sst_interp.record``, ``sst-record``): :class:`~sst_interp.record.options.RecordOptions`;
- ``report`` (``python -m sst_interp.report``, ``sst-report``): :class:`~sst_interp.reporting.ReportConfig`;
- ``generate`` (``python -m sst_interp.generate``, ``sst-generate``): ``ModelSpec`` and ``GenerationConfig``;
- ``train`` (``python -m sst_interp.train``, ``sst-train``): :class:`~sst_interp.train.config.TrainConfig`;
- ``probe`` (``python -m sst_interp.probe``, ``sst-probe``): the probe's ``ProbeConfig`` and ``TrainConfig``;
- ``store`` (``python -m sst_interp.store``, ``sst-store``): a run directory to verify or repair;
- ``codeact_data`` (``python -m sst_interp.train.codeact_data``):
  :class:`~sst_interp.train.codeact_traces.TraceSetConfig`;
- ``position_sim`` (``python -m sst_interp.probe.position_sim``): ``PositionPolicy`` objects.

Each command module builds its parser from dataclass fields declared with :func:`sst_interp.kernels.fields.arg`:
``record``, ``train`` and ``explore`` from their library configs themselves (``RecordOptions``, ``TrainConfig``,
``ExploreConfig``), the others from
one flags dataclass (``probe`` adds one per subcommand); it converts the parsed flags once into the library's typed
configs, calls the library, and
returns an exit code from ``main(argv) -> int``; ``console()`` is its ``[project.scripts]`` entry. The library never
sees a flags object, and nothing below this package imports it: the ``python -m`` entry files elsewhere
(``sst_interp/record/__main__.py``, ``sst_interp/train/codeact_data/__main__.py``, ...) only call
``sst_interp.cli.<command>.main``. Errors follow one contract (:func:`sst_interp.kernels.errors.cli_entry`): bad input is one
``error:`` line on stderr and exit code 2. Device, dtype and rank are resolved in
:mod:`sst_interp.model.devices` only.

Why the project's own flag mechanism (:mod:`sst_interp.cli.args`) and not a library. Tried against the flags the
commands have (tyro 1.0.17, jsonargparse 4.53.0 and simple_parsing 0.1.9, each given the same dataclass):

- tyro: a ``bool | None`` field (``record --demo-preset``) needs a value and has no ``--no-`` form; ``--depths 1,3``
  is refused (lists are space-separated); a repeated ``--source-option`` keeps only the last value (unless marked
  for append); ``--action-tokens <execute>=1,</execute>=2`` is refused (mappings are ``KEY VALUE`` pairs); bad input
  prints a framed multi-line box and exits by itself.
- jsonargparse: flags keep the field's underscores, booleans take a value (``--gates true``), lists and mappings are
  JSON/YAML (``--depths [1,3]``), repetition needs ``--flag+``.
- simple_parsing: ``--demo-preset`` alone parses to None, there are no ``--no-`` forms, lists are space-separated,
  a repeated flag keeps the last value, ``KEY=ID`` mappings are refused, and bad input prints argparse's usage
  block before exiting.

None tells a flag that was given from one left at its default, which ``train --demo`` needs. Each would change
flags users already type, so none is adopted; :mod:`sst_interp.cli.args` (about 200 lines over argparse) stays.
"""
