"""``python -m sst_interp.features``: see :mod:`sst_interp.cli.features`."""

from sst_interp.cli.features import main

raise SystemExit(main())
