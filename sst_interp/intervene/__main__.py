"""``python -m sst_interp.intervene``: see :mod:`sst_interp.cli.intervene`."""

from sst_interp.cli.intervene import main

if __name__ == "__main__":
    raise SystemExit(main())
