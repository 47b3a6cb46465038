"""sst-interp: State Stream Transformers (SST V2) on Hugging Face decoders.

Subpackages:
    model     -- the SST itself (paper Sec. 2): state stream, iterative refinement, checkpoints
    train     -- two-pass training and the matched baseline (Sec. 3)
    data      -- question sources, prompts and graders
    hooks     -- forward-hook recorders used by ``python -m sst_interp.record``
    analyses  -- every measurement of Sec. 4-6 and the appendices
    probe     -- the halting probe (Sec. 6, Appendix F)
"""

__version__ = "0.1.0"
