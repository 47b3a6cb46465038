"""The entry of ``python -m sst_interp.report`` (its ``__main__``); the command is :mod:`sst_interp.cli.report`."""
