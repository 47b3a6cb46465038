"""The configuration of the toy Huginn-style looped model (tests only; loaded as a folder's remote code)."""

from transformers import PretrainedConfig


class ToyHuginnConfig(PretrainedConfig):
    """``n_prelude`` blocks, ``n_core`` blocks repeated ``mean_recurrence`` times with the prelude's output injected
    each time, ``n_coda`` blocks, a final norm and a head; ``n_spare`` blocks that the model holds but never calls,
    and ``mean_backprop_depth``, a training setting its forward never reads (as Huginn's config has one): the trace
    check's tests declare them by mistake."""

    model_type = "toy_huginn"

    def __init__(self, vocab_size: int = 128, hidden_size: int = 32, num_attention_heads: int = 2,
                 n_prelude: int = 1, n_core: int = 2, n_coda: int = 1, mean_recurrence: int = 3,
                 max_position_embeddings: int = 256, n_spare: int = 0, mean_backprop_depth: int = 2,
                 **kwargs) -> None:
        self.vocab_size, self.hidden_size, self.num_attention_heads = vocab_size, hidden_size, num_attention_heads
        self.n_prelude, self.n_core, self.n_coda = n_prelude, n_core, n_coda
        self.mean_recurrence, self.max_position_embeddings = mean_recurrence, max_position_embeddings
        self.n_spare, self.mean_backprop_depth = n_spare, mean_backprop_depth
        super().__init__(**kwargs)
