"""``python -m sst_interp.explore``: see :mod:`sst_interp.cli.explore`."""

from sst_interp.cli.explore import main

raise SystemExit(main())
