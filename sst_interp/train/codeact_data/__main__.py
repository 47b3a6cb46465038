"""``python -m sst_interp.train.codeact_data``: see :mod:`sst_interp.cli.codeact_data`."""

from sst_interp.cli.codeact_data import main

if __name__ == "__main__":
    raise SystemExit(main())
