"""Marian's tokenizers (OPUS-MT checkpoints), in TensorFlow graphs: what an imported run
tokenizes with, and what its export embeds.

A Marian checkpoint tokenizes each side with a SentencePiece model of its own
(source.spm, target.spm) and then maps the pieces to ids with vocab.json (and
target_vocab.json where the vocabularies are separate): a piece the vocabulary
lacks is `<unk>`. transformers' `MarianTokenizer` does this in Python; this
tokenizer does the same with tensorflow-text's SentencePiece op (pieces as
strings, as `encode(out_type=str)` gives them) and a static hash table, so that
it runs in graphs and in a SavedModel that TF Serving loads.

Ids are the library's, not Marian's: the importer (`keras_transformer.pretrained`)
orders the vocabulary so that Marian's `<pad>` is [PAD] 0, `<unk>` is [UNK] 1, a
start row is [START] 2 and `</s>` is [END] 3, the other pieces following in
Marian's order. The tokenizer file holds the SentencePiece model and the pieces
in that order, one file per side.

What it matches, `MarianTokenizer` being the reference (tests/test_pretrained.py):
`tokenize` gives [START], then `MarianTokenizer`'s ids mapped, then [END] (the
model drops the source's [START]: `Transformer(source_start=False)`); a leading
target-language code of multilingual checkpoints (`>>fra<< ...`: ">>" up to the
first "<<") is one token, as `MarianTokenizer.remove_language_code` keeps it.
`detokenize` equals `decode(ids, skip_special_tokens=True)`: the special ids
dropped, the pieces joined, "▁" read as a space, the ends stripped. Not matched:
`MarianTokenizer` also splits the literal texts "</s>", "<unk>" and "<pad>" out of
a sentence as its special tokens; here they are text like any other.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import tensorflow as tf
from tensorflow_text.python.ops.sentencepiece_tokenizer import (
    gen_sentencepiece_tokenizer as sentencepiece_ops,
)

from keras_transformer.atomic import write_atomically
from keras_transformer.constants import RESERVED_TOKENS, START_ID, UNK_ID
from keras_transformer.text.tokenizers.framing import between_start_and_end
from keras_transformer.text.tokenizers.sentencepiece import SentencepieceModel

FORMAT = "keras_transformer.marian_tokenizer/1"
# A leading target-language code: ">>" up to the first "<<" (`MarianTokenizer`'s rule).
_CODE = r"(?s)^(>>.*?<<)"
_WORD_START = "\u2581"  # SentencePiece's "▁"


def encode_tokenizer_file(
    path: str | os.PathLike, file_format: str, sentencepiece_model: bytes, pieces, extra=None
) -> str:
    """Writes a tokenizer file of `file_format` (atomically): its SentencePiece model,
    its pieces in the library's id order and `extra` fields. Returns the path."""
    value = {
        "format": file_format,
        "pieces": list(pieces),
        "sentencepiece_model": base64.b64encode(sentencepiece_model).decode("ascii"),
        **(extra or {}),
    }
    text = json.dumps(value, ensure_ascii=False) + "\n"
    return os.fspath(write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8")))


def decode_tokenizer_file(path: str | os.PathLike, file_format: str, what: str):
    """(SentencePiece model, pieces, the whole value) of a tokenizer file of `file_format`;
    errors name the file."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} is missing.") from None
    except (OSError, ValueError) as error:
        raise ValueError(f"{what} {path} cannot be read: {error}") from None
    if not isinstance(value, dict) or value.get("format") != file_format:
        raise ValueError(f"{path} is not a {what} file of this version ({file_format}).")
    pieces = value.get("pieces")
    if not isinstance(pieces, list) or len(pieces) <= len(RESERVED_TOKENS):
        raise ValueError(f"{path}: its pieces must be a list of more than 4 strings.")
    return base64.b64decode(value["sentencepiece_model"]), [str(piece) for piece in pieces], value


def write_marian_tokenizer(
    path: str | os.PathLike, sentencepiece_model: bytes, pieces: list[str]
) -> str:
    """Writes a side's tokenizer file (atomically): its SentencePiece model and its
    pieces in the library's id order. Returns the path."""
    return encode_tokenizer_file(path, FORMAT, sentencepiece_model, pieces)


def read_marian_tokenizer(path: str | os.PathLike) -> tuple[bytes, list[str]]:
    """(SentencePiece model, pieces) of a tokenizer file; errors name the file."""
    proto, pieces, _ = decode_tokenizer_file(path, FORMAT, "Marian tokenizer")
    return proto, pieces


class MarianTokenizer(tf.Module):
    """Strings <-> the library's ids for one side of an imported Marian checkpoint.

    The interface is the other tokenizers' (`tokenize`, `detokenize`, `lookup`,
    `vocab_size`, `get_vocab_size`, `get_vocab`); usable eagerly, in
    `tf.function` and in a SavedModel (the SentencePiece model is an attribute
    of the op that loads it, the pieces a constant of the graph).

    Args:
        model: the path of a tokenizer file (`write_marian_tokenizer`), or a
            pair `(sentencepiece_model, pieces)`: the side's SentencePiece
            model proto and its pieces in the library's id order ([PAD],
            [UNK], [START], [END] first, under any names).
        name: the module's name. Defaults to None.

    Example:
    >>> tokenizer = MarianTokenizer("run/marian_source.json")
    >>> ids = tokenizer.tokenize(tf.constant([">>fra<< Hello"]))
    >>> tokenizer.detokenize(ids[:, 1:])  # the source side's pieces, read back
    """

    kind = "marian"

    def __init__(self, model, name=None, **unused_settings):
        # `unused_settings`: a run directory's tokenizer settings (`lower_case`, ...)
        # that the other kinds take; Marian's SentencePiece models normalize alone.
        super().__init__(name=name)
        origin = "The Marian tokenizer"
        if isinstance(model, (str, os.PathLike)):
            origin = f"Marian tokenizer {os.fspath(model)}"
            model = read_marian_tokenizer(model)
        proto, pieces = model
        self._model_proto = bytes(proto)
        self._pieces = list(pieces)
        try:
            self._model = SentencepieceModel(self._model_proto)
        except tf.errors.OpError as error:
            raise ValueError(
                f"{origin} holds no valid SentencePiece model: {error.message.strip()}"
            ) from None
        # Every piece but [START] (a row of its own, never a piece of text) maps to its id.
        keys = [piece for i, piece in enumerate(self._pieces) if i != START_ID]
        values = [i for i in range(len(self._pieces)) if i != START_ID]
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(keys, tf.string), tf.constant(values, tf.int64)
            ),
            default_value=UNK_ID,
        )
        self._piece_strings = tf.constant(self._pieces, tf.string)

    @property
    def vocab_size(self) -> int:
        """Number of ids, the reserved ones included."""
        return len(self._pieces)

    @property
    def model_proto(self) -> bytes:
        """The side's serialized SentencePiece model."""
        return self._model_proto

    def save(self, path: str | os.PathLike) -> str:
        """Writes the tokenizer file (atomically) and returns its path."""
        return write_marian_tokenizer(path, self._model_proto, self._pieces)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, strings):
        """`(batch,)` strings -> ragged int64 ids `(batch, None)`: [START], an optional
        language code, the pieces' ids, [END]."""
        has_code = tf.strings.regex_full_match(strings, _CODE + ".*")
        code = tf.strings.regex_replace(strings, _CODE + ".*", r"\1")
        text = tf.strings.regex_replace(strings, _CODE, "")
        codes = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(self._table.lookup(code), has_code),
            tf.cast(has_code, tf.int64),
            validate=False,
        )
        return between_start_and_end(tf.concat([codes, self.pieces_of(text)], axis=1))

    def pieces_of(self, text):
        """`(batch,)` strings -> ragged int64 ids of their SentencePiece pieces."""
        values, row_splits = sentencepiece_ops.sentencepiece_tokenize_op(
            self._model.resource_handle,
            text,
            nbest_size=0,
            alpha=1.0,
            add_bos=False,
            add_eos=False,
            reverse=False,
            out_type=tf.string,
        )
        return tf.RaggedTensor.from_row_splits(
            self._table.lookup(values), row_splits, validate=False
        )

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)], autograph=False)
    def detokenize(self, ids):
        """Ragged ids `(batch, None)` -> `(batch,)` strings, as `MarianTokenizer.decode(ids,
        skip_special_tokens=True)`: reserved and unknown ids dropped."""
        keep = (ids >= len(RESERVED_TOKENS)) & (ids < self.vocab_size)
        return self.join_pieces(tf.ragged.boolean_mask(ids, keep))

    def join_pieces(self, ids):
        """Ragged ids -> `(batch,)` strings: the pieces joined, "▁" read as a space, the
        ends stripped."""
        text = tf.strings.reduce_join(ids.with_flat_values(self._piece(ids.flat_values)), axis=1)
        return tf.strings.strip(tf.strings.regex_replace(text, _WORD_START, " "))

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)], autograph=False)
    def lookup(self, ids):
        """Ragged ids -> ragged piece strings; ids outside the vocabulary read as [UNK]'s."""
        return ids.with_flat_values(self._piece(ids.flat_values))

    def _piece(self, ids):
        known = (ids >= 0) & (ids < self.vocab_size)
        return tf.gather(self._piece_strings, tf.where(known, ids, tf.constant(UNK_ID, tf.int64)))

    @tf.function(input_signature=[], autograph=False)
    def get_vocab_size(self):
        """The number of ids as a scalar tensor (callable on a loaded SavedModel)."""
        return tf.constant(self.vocab_size)

    def get_vocab(self) -> list[str]:
        """Every piece, in id order."""
        return list(self._pieces)
