"""The tokenizers of multilingual checkpoints (NLLB-200, M2M-100, mBART-50), in TensorFlow
graphs: a language code per row.

These checkpoints tokenize both sides with one SentencePiece model, map the pieces to
their ids (NLLB and mBART-50: the model's ids shifted by fairseq's offset; M2M-100:
vocab.json), and frame each sentence with its language: transformers' `NllbTokenizer`
(`eng_Latn`), `M2M100Tokenizer` (`__en__`) and `MBart50Tokenizer` (`en_XX`) give
`[code] pieces </s>` for a source and for a target alike, and the decoder starts from
`</s>` with the target's code forced as its first token (`forced_bos_token_id`).

Ids are the library's (`keras_transformer.pretrained` orders the vocabulary as for
Marian: [PAD] 0, [UNK] 1, [START] 2, [END] 3, the rest in the checkpoint's order), so
`tokenize(text, languages)` gives [START], the row's code, the pieces, [END]: the
model drops the source's [START] (`Transformer(source_start=False)`), and a target's
[START] is the decoder's start. `detokenize` equals `decode(ids,
skip_special_tokens=True)`: every special id dropped (the reserved ones, the language
codes, `<s>`, `<mask>`).

An unknown language code fails the call with one InvalidArgument error naming it, in
Python as in a SavedModel that TF Serving runs.
"""

from __future__ import annotations

import os

import tensorflow as tf

from keras_transformer.constants import RESERVED_TOKENS
from keras_transformer.text.tokenizers.framing import between_start_and_end
from keras_transformer.text.tokenizers.marian import (
    MarianTokenizer,
    decode_tokenizer_file,
    encode_tokenizer_file,
)

FORMAT = "keras_transformer.multilingual_tokenizer/1"


def write_multilingual_tokenizer(
    path: str | os.PathLike,
    sentencepiece_model: bytes,
    pieces: list[str],
    languages: dict[str, int],
    special_ids: list[int],
) -> str:
    """Writes a tokenizer file (atomically): the SentencePiece model, the pieces in the
    library's id order, the language codes' ids and the special ids. Returns the path."""
    extra = {"languages": dict(languages), "special_ids": sorted(int(i) for i in special_ids)}
    return encode_tokenizer_file(path, FORMAT, sentencepiece_model, pieces, extra)


def read_multilingual_tokenizer(path: str | os.PathLike):
    """(SentencePiece model, pieces, languages, special ids) of a tokenizer file."""
    proto, pieces, value = decode_tokenizer_file(path, FORMAT, "Multilingual tokenizer")
    languages, special = value.get("languages"), value.get("special_ids")
    if not isinstance(languages, dict) or not languages or not isinstance(special, list):
        raise ValueError(f"{path}: its languages and special ids are missing.")
    return proto, pieces, {str(k): int(v) for k, v in languages.items()}, [int(i) for i in special]


class MultilingualTokenizer(MarianTokenizer):
    """Strings in a language of the row's choosing <-> the library's ids of an imported
    multilingual checkpoint (one tokenizer serves both sides).

    Args:
        model: the path of a tokenizer file (`write_multilingual_tokenizer`), or a
            tuple `(sentencepiece_model, pieces, languages, special_ids)`: the
            SentencePiece model proto, the pieces in the library's id order,
            language code -> id, and the ids `detokenize` drops.
        language: the code `tokenize` frames every row with, where no code per row
            is given (training, evaluation and the command line, which take one
            language a side). Defaults to None: `tokenize` needs `languages`.
        name: the module's name. Defaults to None.

    Example:
    >>> tokenizer = MultilingualTokenizer("run/multilingual.json")
    >>> ids = tokenizer.tokenize_in(tf.constant(["Hello"]), tf.constant(["eng_Latn"]))
    """

    kind = "multilingual"

    def __init__(self, model, language=None, name=None, **unused_settings):
        if isinstance(model, (str, os.PathLike)):
            model = read_multilingual_tokenizer(model)
        proto, pieces, languages, special_ids = model
        super().__init__((proto, pieces), name=name)
        self._languages = dict(languages)
        if language is not None and language not in self._languages:
            raise ValueError(self.unknown_language_message(language))
        self.language = language
        self._codes = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(self._languages), tf.string),
                tf.constant(list(self._languages.values()), tf.int64),
            ),
            default_value=-1,
        )
        special = [i < len(RESERVED_TOKENS) for i in range(len(pieces))]
        for i in [*special_ids, *self._languages.values()]:
            special[i] = True
        self._special_ids = sorted(
            i for i, flag in enumerate(special) if flag and i >= len(RESERVED_TOKENS)
        )
        self._special = tf.constant(special, tf.bool)

    @property
    def languages(self) -> dict[str, int]:
        """Every language code the checkpoint knows -> its id."""
        return dict(self._languages)

    def unknown_language_message(self, code: str) -> str:
        known = sorted(self._languages)
        shown = ", ".join(known[:6]) + (f", ... ({len(known)} in all)" if len(known) > 6 else "")
        return f"Unknown language code {code!r}; this checkpoint knows {shown}."

    def with_language(self, language: str | None) -> MultilingualTokenizer:
        """A tokenizer of the same files that frames every row with `language`."""
        model = (self.model_proto, self.get_vocab(), self._languages, self._special_ids)
        return MultilingualTokenizer(model, language=language, name=self.name)

    def save(self, path: str | os.PathLike) -> str:
        return write_multilingual_tokenizer(
            path, self.model_proto, self.get_vocab(), self._languages, self._special_ids
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def language_ids(self, codes):
        """`(rows,)` language codes -> int64 ids; an unknown code fails the call with an
        InvalidArgument error naming it."""
        ids = self._codes.lookup(codes)
        unknown = tf.boolean_mask(codes, ids < 0)
        check = tf.debugging.Assert(
            tf.equal(tf.size(unknown), 0),
            ["Unknown language code(s):", unknown, "(the checkpoint's codes: see its languages)"],
            summarize=8,
        )
        with tf.control_dependencies([check]):
            return tf.identity(ids)

    def tokenize(self, strings):
        """`(batch,)` strings -> ragged int64 ids: [START], the tokenizer's `language`,
        the pieces, [END]."""
        if self.language is None:
            raise ValueError(
                "This multilingual tokenizer has no language: use tokenize_in(strings, "
                "languages), or with_language(code)."
            )
        strings = tf.convert_to_tensor(strings, tf.string)
        return self.tokenize_in(strings, tf.fill(tf.shape(strings), self.language))

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)],
        autograph=False,
    )
    def tokenize_in(self, strings, languages):
        """`(batch,)` strings and `(batch,)` (or `(1,)`: one for all) language codes ->
        ragged int64 ids `(batch, None)`: [START], the row's code, the pieces, [END]."""
        codes = self.language_ids(tf.broadcast_to(languages, tf.shape(strings)))
        pieces = self.pieces_of(strings)
        return between_start_and_end(tf.concat([codes[:, None], pieces], axis=1))

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)], autograph=False)
    def detokenize(self, ids):
        """Ragged ids `(batch, None)` -> `(batch,)` strings, as transformers'
        `decode(ids, skip_special_tokens=True)`: every special id dropped."""
        inside = (ids >= 0) & (ids < self.vocab_size)
        safe = tf.where(inside, ids, tf.zeros_like(ids))
        keep = inside & ~tf.ragged.map_flat_values(tf.gather, self._special, safe)
        return self.join_pieces(tf.ragged.boolean_mask(ids, keep))
