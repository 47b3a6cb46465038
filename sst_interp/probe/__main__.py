"""``python -m sst_interp.probe``: see :mod:`sst_interp.cli.probe`."""

from sst_interp.cli.probe import main

raise SystemExit(main())
