"""``python -m sst_interp.probe.position_sim``: see :mod:`sst_interp.cli.position_sim` (the simulation itself is
:mod:`sst_interp.probe.policy_simulation`)."""

if __name__ == "__main__":
    from sst_interp.cli.position_sim import main

    raise SystemExit(main())
