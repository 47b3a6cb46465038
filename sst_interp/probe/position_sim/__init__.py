"""The entry of ``python -m sst_interp.probe.position_sim`` (its ``__main__``); the command is
:mod:`sst_interp.cli.position_sim`, the simulation :mod:`sst_interp.probe.policy_simulation`."""
