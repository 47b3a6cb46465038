"""``python -m sst_interp.intervene {window,trace,steer,attribute}`` (the command lives in :mod:`sst_interp.cli.intervene`)."""

from sst_interp.cli.intervene import main

if __name__ == "__main__":
    main()
