"""``python -m sst_interp.store verify RUN``: see :mod:`sst_interp.store.cli`."""

from sst_interp.store.cli import main

raise SystemExit(main())
