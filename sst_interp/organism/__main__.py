"""``python -m sst_interp.organism``: see :mod:`sst_interp.cli.organism`."""

from sst_interp.cli.organism import main

raise SystemExit(main())
