"""``python -m sst_interp.probe``: see :mod:`sst_interp.probe.cli`."""

import sys

from sst_interp.probe.cli import main

sys.exit(main())
