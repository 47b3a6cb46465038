"""``python -m sst_interp.train``: see :mod:`sst_interp.train.cli`."""

from sst_interp.train.cli import main

raise SystemExit(main())
