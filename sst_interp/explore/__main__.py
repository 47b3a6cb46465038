"""``python -m sst_interp.explore``: see :mod:`sst_interp.cli.explore`."""

from sst_interp.cli.explore import main

if __name__ == "__main__":  # the GMM fit's spawned child imports this module again: it must not serve
    raise SystemExit(main())
