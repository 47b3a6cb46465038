"""``python -m sst_interp.record``."""

from sst_interp.record.cli import main

if __name__ == "__main__":
    main()
