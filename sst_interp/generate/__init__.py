"""The entry of ``python -m sst_interp.generate`` (its ``__main__``); the command is :mod:`sst_interp.cli.generate`."""
