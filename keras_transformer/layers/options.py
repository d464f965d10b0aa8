"""The options every Transformer block takes, written once.

`Transformer`, `Encoder`, `Decoder`, `EncoderLayer` and `DecoderLayer` accept
these as keyword arguments, store them under their own names, forward them to
their blocks in one go and list them in `get_config`; `TrainConfig` and the
command line derive their flags from the same dict. The attention and
feed-forward sublayers take the subset they use, explicitly.
"""

from keras_transformer.layers import validation

# Name -> default (what each does: BLOCK_OPTION_HELP).
BLOCK_OPTIONS = {
    "dropout_rate": 0.1,
    "attention_dropout": 0.0,
    "activation": "relu",
    "layer_norm_epsilon": 1e-5,
    "normalize_first": False,
    "hashed_dropout": False,
    "chunk_queries": False,
}

# Name -> what the option does, in one line: the help of its flag and config key.
BLOCK_OPTION_HELP = {
    "dropout_rate": "dropout rate on the embeddings and on every sublayer's output",
    "attention_dropout": "dropout rate on the attention weights",
    "activation": "feed-forward activation (a Keras activation name)",
    "layer_norm_epsilon": "epsilon of every layer normalization",
    "normalize_first": "pre-LN blocks (plus a final layer norm per stack) instead of post-LN",
    "hashed_dropout": "dropout masks from an integer hash: cheaper under XLA on CPU",
    "chunk_queries": "long queries attend in chunks on TensorFlow's CPU kernels: faster for "
    "long sentences without XLA, but the first step traces much longer",
}

# The options each sublayer takes.
ATTENTION_OPTIONS = (
    "dropout_rate",
    "attention_dropout",
    "layer_norm_epsilon",
    "normalize_first",
    "hashed_dropout",
    "chunk_queries",
)
FEED_FORWARD_OPTIONS = (
    "dropout_rate",
    "activation",
    "layer_norm_epsilon",
    "normalize_first",
    "hashed_dropout",
)


def pop_block_options(kwargs: dict, **given) -> dict:
    """Takes the block options out of `kwargs` (the rest are base layer arguments).

    `given` holds options a class names in its own signature (`dropout_rate`).
    Missing options get their defaults; rates are checked here, once.
    """
    options = {}
    for name, default in BLOCK_OPTIONS.items():
        options[name] = given[name] if name in given else kwargs.pop(name, default)
    validation.check_rate("dropout_rate", options["dropout_rate"])
    validation.check_rate("attention_dropout", options["attention_dropout"])
    return options


def select(options: dict, names) -> dict:
    """The entries of `options` that a sublayer takes."""
    return {name: options[name] for name in names}


class BlockOptionsMixin:
    """Stores the block options as attributes and in `self.block_options`."""

    def _set_block_options(self, options: dict) -> None:
        self.block_options = dict(options)
        for name, value in options.items():
            setattr(self, name, value)
