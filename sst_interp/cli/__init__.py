"""The command layer: one module per command, all built on :mod:`sst_interp.cli.args`.

Each command module declares one flags dataclass (fields declared with :func:`sst_interp.cli.args.arg`), converts
it once into the library's typed configs, calls the library, and returns an exit code. The library never sees a
flags object. Errors follow one contract (:func:`sst_interp.errors.cli_entry`): bad input is one ``error:`` line
on stderr and exit code 2.
"""
