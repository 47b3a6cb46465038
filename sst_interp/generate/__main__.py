"""``python -m sst_interp.generate``: see :mod:`sst_interp.cli.generate`."""

from sst_interp.cli.generate import main

if __name__ == "__main__":
    raise SystemExit(main())
