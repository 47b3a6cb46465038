"""Measurements of the SST V2 paper (sst_interp.analyses), one module per measurement family."""
