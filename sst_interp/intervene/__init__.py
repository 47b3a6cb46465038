"""The entry of ``python -m sst_interp.intervene {window,trace,steer,attribute}`` (its ``__main__``); the command is
:mod:`sst_interp.cli.intervene`."""
