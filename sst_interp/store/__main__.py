"""``python -m sst_interp.store verify RUN``: see :mod:`sst_interp.cli.store`."""

from sst_interp.cli.store import main

raise SystemExit(main())
