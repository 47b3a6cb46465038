"""``python -m sst_interp.train.codeact_data``: see :mod:`sst_interp.cli.codeact_data` (the traces themselves are
:mod:`sst_interp.train.codeact_traces`)."""

if __name__ == "__main__":
    from sst_interp.cli.codeact_data import main

    raise SystemExit(main())
