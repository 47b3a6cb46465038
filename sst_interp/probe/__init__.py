"""See the package docstring of sst_interp."""
