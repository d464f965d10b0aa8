"""WordPiece tokenizers (the TensorFlow tutorial's) on tensorflow-text, exportable in a SavedModel.

A vocabulary is learned from training text with tensorflow-text's BERT
vocabulary learner and saved as a plain file, one token a line. The reserved
tokens come first, so [PAD] is id 0 (the padding id every mask assumes).

WordPiece splits off every punctuation mark and joins words with single spaces
when detokenizing, so it cannot restore the text's own spacing ("there ' s");
`SentencePieceTokenizer` can.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as vocab_learner

from keras_transformer.atomic import write_atomically
from keras_transformer.constants import RESERVED_TOKENS, UNK, UNK_ID
from keras_transformer.text.tokenizers.framing import between_start_and_end
from keras_transformer.text.tokenizers.normalization import normalize_text
from keras_transformer.text.tokenizers.settings import check_normalization_form


def learn_vocabulary(
    texts: Iterable[str] | tf.data.Dataset,
    vocab_size: int = 8000,
    lower_case: bool = True,
    normalization_form: str | None = "NFC",
    lower_thresh: int = 5,
) -> list[str]:
    """Learns a WordPiece vocabulary (reserved tokens first) from `texts`.

    Args:
        texts: strings, or a `tf.data.Dataset` of scalar strings.
        vocab_size: target size. Small corpora give fewer tokens than asked.
        lower_case, normalization_form: the normalization (`normalize_text`);
            give the tokenizer the same.
        lower_thresh: minimum count of a word piece; lower it for tiny corpora.
    """
    if not isinstance(texts, tf.data.Dataset):
        texts = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), tf.string))
    normalization_form = check_normalization_form(normalization_form)
    texts = texts.batch(1024).map(
        lambda s: normalize_text(s, lower_case, normalization_form),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return vocab_learner.bert_vocab_from_dataset(
        texts.prefetch(2),
        vocab_size=vocab_size,
        reserved_tokens=RESERVED_TOKENS,
        bert_tokenizer_params={"lower_case": False},
        learn_params={"lower_thresh": lower_thresh},
    )


def write_vocabulary(vocab: list[str], path: str | os.PathLike) -> str:
    """Writes `vocab` to `path`, one token a line, and returns the path.

    The file is written under a temporary name and renamed into place, so a
    kill mid-write never leaves half a vocabulary that a resumed run would use.
    """
    text = "".join(token + "\n" for token in vocab)
    path = write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return os.fspath(path)


def read_vocabulary(path: str | os.PathLike) -> list[str]:
    """The vocabulary in the file `path`; ValueError naming the file if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            vocab = [line.rstrip("\n") for line in f]
    except FileNotFoundError:
        raise FileNotFoundError(f"WordPiece vocabulary {path} is missing.") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"WordPiece vocabulary {path} is not UTF-8 text: {error}") from None
    except OSError as error:
        raise OSError(f"WordPiece vocabulary {path} cannot be read: {error.strerror}") from None
    if vocab[: len(RESERVED_TOKENS)] != RESERVED_TOKENS:
        raise ValueError(
            f"Vocabulary {path} must start with the reserved tokens {RESERVED_TOKENS}; "
            f"it starts with {vocab[: len(RESERVED_TOKENS)]}"
        )
    return vocab


class Tokenizer(tf.Module):
    """Strings <-> WordPiece ids, usable eagerly, in `tf.function` and in a SavedModel.

    `tokenize` adds [START] and [END]; `detokenize` joins word pieces into
    words separated by spaces and drops reserved tokens.

    Args:
        vocab: list of tokens (reserved tokens first) or a vocabulary file.
        lower_case: lowercase the text before tokenizing (accents and ß are kept).
        normalization_form: Unicode normalization ("NFC", "NFKC", ... or None).
    """

    kind = "wordpiece"

    def __init__(self, vocab, lower_case=True, normalization_form="NFC", name=None):
        super().__init__(name=name)
        if isinstance(vocab, (str, os.PathLike)):
            vocab = read_vocabulary(vocab)
        if list(vocab[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(f"The vocabulary must start with {RESERVED_TOKENS}.")
        self.lower_case = lower_case
        self.normalization_form = check_normalization_form(normalization_form)
        self.vocab = tf.Variable(list(vocab), trainable=False, name="vocab")
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(vocab)), tf.range(len(vocab), dtype=tf.int64)
            ),
            num_oov_buckets=1,
        )
        self._tokenizer = tf_text.BertTokenizer(table, lower_case=False, unknown_token=UNK)
        self._vocab_size = len(vocab)

    @property
    def vocab_size(self) -> int:
        """Number of ids, reserved tokens included."""
        return self._vocab_size

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, strings):
        """`(batch,)` strings -> ragged int64 ids `(batch, None)` with START/END."""
        strings = normalize_text(strings, self.lower_case, self.normalization_form)
        pieces = self._tokenizer.tokenize(strings)  # (batch, words, pieces)
        # Each row's pieces, words merged (`merge_dims` would add 66 nodes of checks).
        ids = tf.RaggedTensor.from_row_splits(
            pieces.flat_values,
            tf.gather(pieces.values.row_splits, pieces.row_splits),
            validate=False,
        )
        # On the flat values: `tf.where` on the ragged ids built 1,368 of this function's
        # 2,005 graph nodes (ragged broadcasting), which every new tf.data iterator over a
        # pipeline that tokenizes instantiates again: 1.4-2.6 s an iterator against 0.6 s.
        ids = tf.ragged.map_flat_values(
            lambda flat: tf.where(flat >= self._vocab_size, tf.constant(UNK_ID, tf.int64), flat),
            ids,
        )
        return between_start_and_end(ids)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)], autograph=False)
    def detokenize(self, ids):
        """Ragged ids `(batch, None)` -> `(batch,)` strings without reserved tokens."""
        ids = tf.ragged.boolean_mask(ids, ids >= len(RESERVED_TOKENS))
        pieces = tf.gather(self.vocab, ids)
        text = tf.strings.reduce_join(pieces, separator=" ", axis=-1)
        # A "##" piece continues the word before it.
        return tf.strings.regex_replace(text, " ##", "")

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)], autograph=False)
    def lookup(self, ids):
        """Ragged ids -> ragged token strings (word pieces, reserved tokens kept)."""
        return tf.gather(self.vocab, ids)

    @tf.function(input_signature=[], autograph=False)
    def get_vocab_size(self):
        """The number of ids as a scalar tensor (callable on a loaded SavedModel)."""
        return tf.constant(self._vocab_size)

    def get_vocab(self) -> list[str]:
        """Every token, in id order."""
        return [t.decode("utf-8") for t in self.vocab.numpy()]

    def save_vocabulary(self, path) -> str:
        """Writes the vocabulary to `path` (one token a line) and returns the path."""
        return write_vocabulary(self.get_vocab(), path)


# The name beside `SentencePieceTokenizer`; `Tokenizer` stays for existing code.
WordPieceTokenizer = Tokenizer
