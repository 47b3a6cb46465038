"""``python -m sst_interp.report``: see :mod:`sst_interp.cli.report`."""

from sst_interp.cli.report import main

if __name__ == "__main__":
    raise SystemExit(main())
