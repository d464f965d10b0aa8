"""A request's strings as token ids, cut to a translator's bounds: what every signature
reads first.

Each string is cut at a byte limit before it is tokenized (`SOURCE_BYTES_PER_TOKEN`
bytes a token of the limit: a 1 MB row costs no more tokenizing than a long
sentence), then at its token limit, and every row cut either way is reported. Sources
(`source_tokens`) keep [START] and [END]; target-side text (`target_tokens`: a target
prefix to continue, a given translation to score) keeps its words only, with room
left for the [END] that follows them.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.constants import PAD_ID
from keras_transformer.text.tokenizers.framing import between_start_and_end

# Before tokenizing, a string is cut at this many bytes per token of its limit. A
# SentencePiece piece has at most 16 characters (64 bytes), so a row of text cut
# there still has more tokens than the limit; one that reaches the byte limit first
# (long whitespace runs, WordPiece's overlong words) is flagged all the same.
SOURCE_BYTES_PER_TOKEN = 64


def source_tokens(tokenizer, text, max_source_length: int):
    """`(batch,)` strings -> int64 ragged ids cut to `max_source_length`, and which were cut.

    Returns:
        ids: int64 `tf.RaggedTensor` `(batch, None)`, [START] ... [END].
        truncated: bool `(batch,)`, True where the source was cut (at
            `max_source_length` tokens, or first at its byte limit).
    """
    max_bytes = max_source_length * SOURCE_BYTES_PER_TOKEN
    cut_bytes = tf.strings.length(text) > max_bytes
    tokens = tokenizer.tokenize(tf.strings.substr(text, 0, max_bytes))
    # Keep [START] and [END]; cut the words between them.
    words = tokens[:, 1:-1]
    room = max_source_length - 2
    truncated = tf.logical_or(cut_bytes, words.row_lengths() > room)
    return between_start_and_end(words[:, :room]), truncated


def target_tokens(tokenizer, text, max_tokens: int):
    """`(batch,)` target-side strings -> int64 ragged ids without [START] and [END],
    cut so that they and an [END] after them fit in `max_tokens`, and which were cut.

    [PAD] ids are dropped: a 0 among a row's ids would read as its end.

    Returns:
        ids: int64 `tf.RaggedTensor` `(batch, None)`, at most `max_tokens - 1` a row.
        truncated: bool `(batch,)`.
    """
    max_bytes = max_tokens * SOURCE_BYTES_PER_TOKEN
    cut_bytes = tf.strings.length(text) > max_bytes
    words = tokenizer.tokenize(tf.strings.substr(text, 0, max_bytes))[:, 1:-1]
    words = tf.ragged.boolean_mask(words, tf.not_equal(words, PAD_ID))
    room = max_tokens - 1
    return words[:, :room], tf.logical_or(cut_bytes, words.row_lengths() > room)
