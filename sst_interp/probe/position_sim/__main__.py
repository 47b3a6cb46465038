"""``python -m sst_interp.probe.position_sim``: see :mod:`sst_interp.cli.position_sim`."""

from sst_interp.cli.position_sim import main

if __name__ == "__main__":
    raise SystemExit(main())
