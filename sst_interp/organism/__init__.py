"""Model organisms of latent iteration: small looped models trained here on a task whose mechanism is known.

- :mod:`~sst_interp.organism.task`: the hops task (k-hop pointer chasing; the hop count and every intermediate value
  are known per question);
- :mod:`~sst_interp.organism.tokenizer`: its character tokenizer, saved as a Hugging Face tokenizer;
- :mod:`~sst_interp.organism.looped`: the looped organism (transformers' HRM-Text) and its depth-by-hop evaluation;
- :mod:`~sst_interp.organism.train`: training from scratch at a loop count sampled per batch (or one pass: the SST
  organism's backbone, whose SST stage is :mod:`sst_interp.train.organism`, a floor up);
- :mod:`~sst_interp.organism.tables`: the depth-by-hop tables every organism's evaluation fills;
- :mod:`~sst_interp.organism.carried`: the task spec an organism folder declares it was trained on;
- :mod:`~sst_interp.organism.overshoot`: what one H-cycle past a counted question's sufficient depth does to its
  answer, against the value its chain predicts.
"""
