"""The entry of ``python -m sst_interp.train.codeact_data`` (its ``__main__``); the command is
:mod:`sst_interp.cli.codeact_data`, the traces :mod:`sst_interp.train.codeact_traces`."""
