"""Forward-hook recorders (sst_interp.hooks): capture per-iteration layer outputs and logits inline."""
