"""``python -m sst_interp.record``: see :mod:`sst_interp.cli.record`."""

from sst_interp.cli.record import main

raise SystemExit(main())
