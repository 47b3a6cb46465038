"""``python -m sst_interp.train``: see :mod:`sst_interp.cli.train`."""

from sst_interp.cli.train import main

raise SystemExit(main())
