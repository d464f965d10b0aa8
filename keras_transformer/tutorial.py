"""The TensorFlow tutorial's names, with its signatures, calls and return values.

"Neural machine translation with a Transformer and Keras" (tensorflow/text,
docs/tutorials/transformer.ipynb) defines its classes in the notebook. Its
usage code runs unchanged when those definitions are replaced by

    from keras_transformer.tutorial import *

Why a module of its own: most of the tutorial's names are the library's own
classes, which take the tutorial's arguments and calls as they are, and are
re-exported here. The rest would break the main API if they were its own, so
they live here:

- `positional_encoding` returns a tensor (the tutorial calls `.numpy()` on it);
  `layers.positional_encoding` returns the numpy array its users compute with.
- `Translator(tokenizers, transformer)` translates one sentence and returns
  `(text, tokens, attention_weights)`; the library's `translator.Translator`
  translates batches into a dict, and its traced functions are what a
  SavedModel serves.
- `ExportTranslator(translator)` maps one string to one string and is saved
  with `tf.saved_model.save`; `export.export_translator` writes TF Serving's
  layout and signatures.
- `plot_attention_head` and `plot_attention_weights` draw into the current
  matplotlib figure with the user's backend, as the notebook does; `plotting`
  draws figures of its own, for files.

The differences kept on purpose: a layer built from `d_model` has heads of
`d_model // num_heads` (the paper's; the tutorial's layers use `d_model` per
head), and the positional encoding interleaves sines and cosines (the paper's
order; the tutorial concatenates them, the same features in another order).
"""

from __future__ import annotations

import math
import types

import numpy as np
import tensorflow as tf

from keras_transformer import layers
from keras_transformer.constants import START_ID
from keras_transformer.inference.batch_decoding import tf_variable
from keras_transformer.inference.translator import Translator as BatchTranslator
from keras_transformer.layers import (
    BaseAttention,
    CausalSelfAttention,
    CrossAttention,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    GlobalSelfAttention,
    PositionalEmbedding,
    validation,
)
from keras_transformer.models.transformer import Transformer
from keras_transformer.training.losses import masked_loss
from keras_transformer.training.metrics import masked_accuracy
from keras_transformer.training.schedules import CustomSchedule

# The tutorial's longest sequence in tokens, and its translator's default.
MAX_TOKENS = 128

__all__ = [
    "MAX_TOKENS",
    "BaseAttention",
    "CausalSelfAttention",
    "CrossAttention",
    "CustomSchedule",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "ExportTranslator",
    "FeedForward",
    "GlobalSelfAttention",
    "PositionalEmbedding",
    "Transformer",
    "Translator",
    "masked_accuracy",
    "masked_loss",
    "plot_attention_head",
    "plot_attention_weights",
    "positional_encoding",
]


def positional_encoding(length, depth):
    """The sinusoidal encoding as a float32 tensor `(length, depth)`, as the tutorial's.

    The values of `layers.positional_encoding`: sines and cosines interleaved,
    as in the paper.
    """
    return tf.constant(layers.positional_encoding(length, depth))


# The tokenizers `plot_attention_weights` uses when given none: the notebook's
# function reads its global `tokenizers`, which the last `Translator` built was given.
_notebook = types.SimpleNamespace(tokenizers=None)


class Translator(tf.Module):
    """Greedy translation of one sentence, as the tutorial's `Translator`.

    Decoding runs the library's cached greedy search (`translator.Translator`):
    the tokens the tutorial's loop finds by re-running the model at every
    step, each step costing one position. It stops at [END] or after
    `max_length` tokens, as the tutorial's loop does.

    Args:
        tokenizers: an object with `.pt` (source) and `.en` (target)
            tokenizers offering `tokenize` (strings -> ragged ids with
            [START] and [END]), `detokenize` and `lookup` (ragged ids ->
            strings, tokens): the tutorial's downloaded converter, or the
            library's tokenizers.
        transformer: a `Transformer` (built here if it is not yet).

    Call arguments:
        sentence: a string, or a string tensor of shape `()` or `(1,)`.
        max_length: int. Most generated tokens. Defaults to `MAX_TOKENS`.

    Returns:
        `(text, tokens, attention_weights)`: the translation (string scalar);
        its tokens with [START] first (and [END] last when it ended); and the
        last decoder layer's cross-attention `(1, heads, len(tokens) - 1,
        source_tokens)`, whose row i is the step that produced `tokens[i + 1]`
        (so the tutorial's plots label the rows `tokens[1:]`).
    """

    def __init__(self, tokenizers, transformer):
        super().__init__()
        if not transformer.built:
            # Its variables must exist before they are tracked and traced.
            transformer.build(((None, None), (None, None)))
        self.tokenizers = tokenizers
        # What a SavedModel of an `ExportTranslator` needs, tracked whatever
        # object `tokenizers` is. The Keras model itself, and the library
        # translators (whose traced functions a save would trace again), stay
        # out of the tracked object graph.
        self.source_tokenizer = tokenizers.pt
        self.target_tokenizer = tokenizers.en
        self.model_variables = [tf_variable(v) for v in transformer.variables]
        self._untracked = types.SimpleNamespace(transformer=transformer, decoders={})
        _notebook.tokenizers = tokenizers

    @property
    def transformer(self):
        return self._untracked.transformer

    def decode(self, sentence, max_length=MAX_TOKENS):
        """`(text, output, context_ids)` for one sentence: the translation, [START]
        and the generated ids `(1, tokens)`, and the source ids `(1, source_tokens)`."""
        sentence = tf.reshape(tf.convert_to_tensor(sentence, tf.string), [-1])
        outputs = self._decoder(max_length).translate(sentence[:1])
        generated = outputs["tokens"][:1, : outputs["lengths"][0]]
        start = tf.constant([[START_ID]], generated.dtype)
        output = tf.concat([start, generated], axis=1)
        return outputs["translation"][0], output, outputs["context_ids"][:1]

    def __call__(self, sentence, max_length=MAX_TOKENS):
        text, output, context_ids = self.decode(sentence, max_length)
        tokens = self.tokenizers.en.lookup(tf.RaggedTensor.from_tensor(output))[0]
        # One teacher-forced pass gives the attention of every decoding step,
        # as the tutorial computes it after its loop.
        _, attention = self.transformer(
            (context_ids, output[:, :-1]), training=False, return_attention_scores=True
        )
        return text, tokens, attention[-1]

    def _decoder(self, max_length):
        """The library translator that decodes at most `max_length` tokens (one per length)."""
        max_length = validation.positive_int("max_length", max_length)
        decoders = self._untracked.decoders
        if max_length not in decoders:
            decoders[max_length] = BatchTranslator(
                self.transformer,
                self.tokenizers.pt,
                self.tokenizers.en,
                max_length=max_length,
                max_length_a=None,  # no cap relative to the source: the tutorial has none
            )
        return decoders[max_length]


class ExportTranslator(tf.Module):
    """A tutorial `Translator` to save: `tf.saved_model.save(ExportTranslator(translator), path)`.

    Calling it, or the object `tf.saved_model.load(path)` gives back, maps one
    sentence to its translation (a string scalar) with greedy decoding of at
    most `MAX_TOKENS` tokens. The SavedModel holds the tokenizers and the
    weights and runs where only tensorflow and tensorflow_text are imported.
    For TF Serving's layout and signatures, batches and beam search, use
    `export.export_translator`.
    """

    def __init__(self, translator):
        super().__init__()
        self.translator = translator

    @tf.function(input_signature=[tf.TensorSpec(shape=[], dtype=tf.string)], autograph=False)
    def __call__(self, sentence):
        # Only the text: the served graph skips the attention pass.
        text, _, _ = self.translator.decode(sentence, max_length=MAX_TOKENS)
        return text


def plot_attention_head(in_tokens, translated_tokens, attention):
    """One head's attention in the current matplotlib axes, as the tutorial draws it.

    Args:
        in_tokens: the source tokens (a string tensor or a list): the columns.
        translated_tokens: the translation's tokens, [START] first, as
            `Translator` returns them. [START] was never generated, so the
            rows are `translated_tokens[1:]`.
        attention: weights `(len(translated_tokens) - 1, len(in_tokens))`.
    """
    import matplotlib.pyplot as plt

    columns = _labels(in_tokens)
    rows = _labels(translated_tokens)[1:]
    attention = np.asarray(attention)
    if attention.shape != (len(rows), len(columns)):
        raise ValueError(
            f"`attention` has shape {attention.shape}; the labels ask for "
            f"({len(rows)}, {len(columns)}): one row per translated token after [START] "
            "and one column per source token."
        )
    ax = plt.gca()
    ax.matshow(attention)
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels(columns, rotation=90)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)


def plot_attention_weights(sentence, translated_tokens, attention_heads, tokenizers=None):
    """Every head's attention for `sentence`, one subplot each, then `plt.show()`.

    Args:
        sentence: the source sentence; `tokenizers.pt` gives its tokens.
        translated_tokens: as `Translator` returns them, [START] first.
        attention_heads: `(heads, len(translated_tokens) - 1, source_tokens)`.
        tokenizers: with `.pt`. Defaults to those of the last `Translator`
            built, standing in for the notebook's global `tokenizers`.
    """
    import matplotlib.pyplot as plt

    if tokenizers is None:
        tokenizers = _notebook.tokenizers
    if tokenizers is None:
        raise ValueError(
            "plot_attention_weights needs `tokenizers` (with `.pt`) to split the sentence; "
            "build a Translator first or pass them."
        )
    sentence = tf.reshape(tf.convert_to_tensor(sentence, tf.string), [1])
    in_tokens = tokenizers.pt.lookup(tokenizers.pt.tokenize(sentence))[0]
    heads = len(attention_heads)
    columns = min(4, heads)
    fig = plt.figure(figsize=(16, 8))
    for h, head in enumerate(attention_heads):
        ax = fig.add_subplot(math.ceil(heads / columns), columns, h + 1)
        plot_attention_head(in_tokens, translated_tokens, head)
        ax.set_xlabel(f"Head {h + 1}")
    plt.tight_layout()
    plt.show()


def _labels(tokens) -> list[str]:
    """Tick labels from a string tensor or a list of str / bytes."""
    values = tokens.numpy() if hasattr(tokens, "numpy") else tokens
    return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in values]
