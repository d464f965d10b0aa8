"""SentencePiece tokenizers: reversible subwords, the library's default.

A model is learned from training text with the `sentencepiece` package (in
memory, from an iterator of sentences) and run in graphs with
tensorflow-text's SentencePiece ops, which TF Serving links; the model proto
is an attribute of the op that loads it, so it travels inside the SavedModel.

What it guarantees: `detokenize(tokenize(x)) == normalize(x)`, where
`normalize` is `normalize_text(x, lower_case, normalization_form,
collapse_whitespace=True)`. By default (cased, NFC) that changes nothing but
undecodable bytes (U+FFFD), canonically equivalent spellings of a character
(a + combining tilde -> ã) and whitespace (each run one space, the ends
stripped). SentencePiece's own normalization is switched off
("identity"), so that this TensorFlow function is the whole of it. Characters
the model has no piece for (emoji, rare scripts) are spelled as UTF-8 byte
pieces ("byte fallback") and come back intact; [UNK] is never produced.

The module learns a model (`learn_sentencepiece_model`), writes and reads it
(`write_sentencepiece_model`, `read_sentencepiece_model`) and runs it
(`SentencePieceTokenizer`), with the op's resource (`SentencepieceModel`) and the
quiet charsmap its model loads with. They stay together because each step reads
the same model proto and normalization settings: split apart, learning and running
could drift into two notions of one model.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import tensorflow as tf

# The SentencePiece ops themselves: tensorflow-text's `SentencepieceTokenizer` class
# keeps its model in a resource that a `tf.random.set_seed` deletes (see
# `SentencepieceModel`), so the tokenizer below calls the ops with a resource of
# its own. Importing this module also registers the ops a loaded SavedModel runs.
from tensorflow_text.python.ops.sentencepiece_tokenizer import (
    gen_sentencepiece_tokenizer as sentencepiece_ops,
)

from keras_transformer.atomic import write_atomically
from keras_transformer.constants import (
    END,
    END_ID,
    PAD,
    PAD_ID,
    RESERVED_TOKENS,
    START,
    START_ID,
    UNK,
    UNK_ID,
)
from keras_transformer.text.tokenizers.framing import between_start_and_end
from keras_transformer.text.tokenizers.normalization import normalize_text
from keras_transformer.text.tokenizers.settings import (  # noqa: F401  (their home before)
    BYTE_PIECES,
    SUBWORD_MODELS,
    check_normalization_form,
)

# Share of the training characters that get a piece of their own; the rarest
# rest is spelled in bytes (byte fallback), so it still round-trips. 0.9995 is
# SentencePiece's advice for languages with many characters.
DEFAULT_CHARACTER_COVERAGE = 0.9995
# SentencePiece keeps every training sentence in memory; beyond this many it
# samples them at random.
MAX_TRAINING_SENTENCES = 2_000_000
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def learn_sentencepiece_model(
    texts: Iterable[str] | tf.data.Dataset,
    vocab_size: int = 8000,
    model_type: str = "unigram",
    lower_case: bool = False,
    normalization_form: str | None = "NFC",
    character_coverage: float = DEFAULT_CHARACTER_COVERAGE,
    max_sentences: int = MAX_TRAINING_SENTENCES,
) -> bytes:
    """Learns a SentencePiece model from `texts` and returns its serialized proto.

    The reserved pieces are ids 0-3 ([PAD], [UNK], [START], [END]), then come
    the 256 byte pieces, then the learned ones. Give the tokenizer the same
    `lower_case` and `normalization_form`.

    Args:
        texts: strings, or a `tf.data.Dataset` of scalar strings.
        vocab_size: number of pieces. A small corpus gives fewer; at least
            the 260 reserved and byte pieces plus the text's characters.
        model_type: "unigram" (SentencePiece's default) or "bpe".
        lower_case, normalization_form: the normalization (`normalize_text`)
            applied to `texts` before learning.
        character_coverage: share of the characters that get their own piece.
        max_sentences: learn from a random sample of this many sentences when
            there are more.
    """
    if model_type not in SUBWORD_MODELS:
        raise ValueError(
            f"`model_type` must be one of {SUBWORD_MODELS}. Received: model_type={model_type!r}"
        )
    smallest = len(RESERVED_TOKENS) + BYTE_PIECES + 1
    if vocab_size < smallest:
        raise ValueError(
            f"`vocab_size` must be at least {smallest} for SentencePiece ({len(RESERVED_TOKENS)} "
            f"reserved and {BYTE_PIECES} byte pieces come first). Received: vocab_size={vocab_size}"
        )
    try:
        import sentencepiece
    except ImportError:
        raise ImportError(
            "Learning a SentencePiece model needs the `sentencepiece` package: "
            "pip install sentencepiece"
        ) from None
    normalization_form = check_normalization_form(normalization_form)
    counted = {"sentences": 0}

    def sentences() -> Iterator[str]:
        for sentence in _normalized_sentences(texts, lower_case, normalization_form):
            counted["sentences"] += 1
            yield sentence

    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            byte_fallback=True,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=START_ID,
            eos_id=END_ID,
            pad_piece=PAD,
            unk_piece=UNK,
            bos_piece=START,
            eos_piece=END,
            # The text arrives normalized by `normalize_text`, which the
            # tokenizer applies in its graph too; SentencePiece must change
            # nothing more, or the round trip would depend on its rules.
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            # A small corpus gives fewer pieces than asked instead of an error.
            hard_vocab_limit=False,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as error:
        if counted["sentences"] == 0:
            raise ValueError("No training text to learn a SentencePiece model from.") from None
        too_small = _TOO_SMALL.search(str(error))
        if too_small:
            needed = int(too_small.group(2))
            raise ValueError(
                f"vocab_size={vocab_size} is too small for a SentencePiece model of this text: "
                f"it needs at least {needed} pieces ({len(RESERVED_TOKENS)} reserved, "
                f"{BYTE_PIECES} byte pieces and {needed - len(RESERVED_TOKENS) - BYTE_PIECES} "
                "characters). Raise vocab_size, or lower character_coverage."
            ) from None
        raise
    return model.getvalue()


def _normalized_sentences(texts, lower_case, normalization_form) -> Iterator[str]:
    """The non-empty `texts` after `normalize_text`, as Python strings."""
    if not isinstance(texts, tf.data.Dataset):
        texts = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), tf.string))
    batches = texts.batch(1024).map(
        lambda s: normalize_text(s, lower_case, normalization_form, collapse_whitespace=True),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    for batch in batches.prefetch(2).as_numpy_iterator():
        # Bytes were replaced by U+FFFD where undecodable, so this decodes.
        yield from (sentence.decode("utf-8") for sentence in batch if sentence)


def write_sentencepiece_model(model_proto: bytes, path: str | os.PathLike) -> str:
    """Writes a model proto to `path` and returns the path.

    The file is written under a temporary name and renamed into place, so a
    kill mid-write never leaves half a model that a resumed run would use.
    """
    path = write_atomically(path, lambda tmp: tmp.write_bytes(model_proto))
    return os.fspath(path)


def read_sentencepiece_model(path: str | os.PathLike) -> bytes:
    """The model proto in the file `path`; errors name the file."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"SentencePiece model {path} is missing.") from None
    except OSError as error:
        raise OSError(f"SentencePiece model {path} cannot be read: {error.strerror}") from None


class SentencePieceTokenizer(tf.Module):
    """Strings <-> SentencePiece ids, usable eagerly, in `tf.function` and in a SavedModel.

    `tokenize` normalizes the text (`normalize`), splits it into pieces and
    adds [START] and [END]; `detokenize` drops the reserved ids and gives the
    text back: `detokenize(tokenize(x)) == normalize(x)`. The interface is the
    WordPiece `Tokenizer`'s.

    Args:
        model: a serialized model proto (`learn_sentencepiece_model`) or the
            path of a model file.
        lower_case: lowercase the text before tokenizing. Defaults to False
            (cased).
        normalization_form: Unicode normalization ("NFC", "NFKC", ... or
            None). Defaults to "NFC", which changes no character's look.

    Example:
    >>> tokenizer = SentencePieceTokenizer(learn_sentencepiece_model(texts, 8000))
    >>> ids = tokenizer.tokenize(tf.constant(["  Ein Mann, der’s kann 🙂"]))
    >>> tokenizer.detokenize(ids).numpy()[0].decode()
    'Ein Mann, der’s kann 🙂'
    """

    kind = "sentencepiece"

    def __init__(self, model, lower_case=False, normalization_form="NFC", name=None):
        super().__init__(name=name)
        origin = "The SentencePiece model"
        if isinstance(model, (str, os.PathLike)):
            origin = f"SentencePiece model {os.fspath(model)}"
            model = read_sentencepiece_model(model)
        self.lower_case = bool(lower_case)
        self.normalization_form = check_normalization_form(normalization_form)
        self._model_proto = bytes(model)
        try:
            self._model = SentencepieceModel(self._model_proto)
            handle = self._model.resource_handle
            vocab_size = int(sentencepiece_ops.sentencepiece_vocab_size_op(handle))
            first = sentencepiece_ops.sentencepiece_id_to_string_op(
                handle, tf.range(min(vocab_size, len(RESERVED_TOKENS)))
            )
        except tf.errors.OpError as error:
            raise ValueError(
                f"{origin} is not a valid SentencePiece model: {error.message.strip()}"
            ) from None
        first = [piece.decode("utf-8") for piece in first.numpy()]
        if first != RESERVED_TOKENS:
            raise ValueError(
                f"{origin} must have the pieces {RESERVED_TOKENS} as ids 0-3 (the ids every "
                f"mask and decoding loop assumes); it has {first}. Learn it with "
                "learn_sentencepiece_model."
            )
        self._vocab_size = vocab_size

    @property
    def vocab_size(self) -> int:
        """Number of ids, reserved and byte pieces included."""
        return self._vocab_size

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._model_proto

    def _normalize(self, strings):
        return normalize_text(
            strings, self.lower_case, self.normalization_form, collapse_whitespace=True
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def normalize(self, strings):
        """`(batch,)` strings as the tokenizer sees them, and as `detokenize` gives them back."""
        return self._normalize(strings)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, strings):
        """`(batch,)` strings -> ragged int64 ids `(batch, None)` with START/END."""
        return self._tokenize(strings, nbest_size=0, alpha=1.0)  # the best segmentation

    def tokenize_sampled(self, strings, alpha):
        """As `tokenize`, but each call draws a segmentation of each string at random.

        Subword regularization for training (Kudo, 2018; Provilkov et al., 2020):
        a unigram model samples among all segmentations, weighted by their
        probability to the power `alpha` (1 follows the model; smaller values are
        flatter and give more, shorter pieces); a BPE model drops each merge with
        probability `alpha` (BPE-dropout). Every sample detokenizes to the same
        text as `tokenize`'s ids. The draws come from SentencePiece's own random
        generator, which no TensorFlow seed reaches. `alpha` is a Python
        number (it is an attribute of the op, fixed when the graph is built).
        Not part of a SavedModel: translation always takes the best segmentation.
        """
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1]. Received: alpha={alpha}")
        # nbest_size -1: sample from every segmentation (unigram); BPE ignores it.
        return self._tokenize(strings, nbest_size=-1, alpha=alpha)

    def _tokenize(self, strings, nbest_size, alpha):
        values, row_splits = sentencepiece_ops.sentencepiece_tokenize_op(
            self._model.resource_handle,
            self._normalize(strings),
            nbest_size=nbest_size,
            alpha=alpha,
            add_bos=False,
            add_eos=False,
            reverse=False,
            out_type=tf.int32,
        )
        ids = tf.RaggedTensor.from_row_splits(tf.cast(values, tf.int64), row_splits, validate=False)
        return between_start_and_end(ids)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)], autograph=False)
    def detokenize(self, ids):
        """Ragged ids `(batch, None)` -> `(batch,)` strings; reserved and unknown ids dropped."""
        keep = (ids >= len(RESERVED_TOKENS)) & (ids < self._vocab_size)
        ids = tf.ragged.boolean_mask(ids, keep)
        return sentencepiece_ops.sentencepiece_detokenize_op(
            self._model.resource_handle,
            tf.cast(ids.flat_values, tf.int32),
            ids.row_splits,
            add_bos=False,
            add_eos=False,
            reverse=False,
        )

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)], autograph=False)
    def lookup(self, ids):
        """Ragged ids -> ragged piece strings ("▁" marks a word start; reserved pieces kept).

        Ids outside the vocabulary read as [UNK].
        """
        flat = ids.flat_values  # not `tf.where` on the ragged ids: see WordPiece's tokenize
        known = (flat >= 0) & (flat < self._vocab_size)
        flat = tf.where(known, flat, tf.constant(UNK_ID, tf.int64))
        return ids.with_flat_values(self._id_to_string(flat))

    def _id_to_string(self, ids):
        return sentencepiece_ops.sentencepiece_id_to_string_op(
            self._model.resource_handle, tf.cast(ids, tf.int32)
        )

    @tf.function(input_signature=[], autograph=False)
    def get_vocab_size(self):
        """The number of ids as a scalar tensor (callable on a loaded SavedModel)."""
        return tf.constant(self._vocab_size)

    def get_vocab(self) -> list[str]:
        """Every piece, in id order (byte pieces read "<0x41>")."""
        pieces = self._id_to_string(tf.range(self._vocab_size))
        return [piece.decode("utf-8") for piece in pieces.numpy()]

    def save_model(self, path: str | os.PathLike) -> str:
        """Writes the model proto to `path` (atomically) and returns the path."""
        return write_sentencepiece_model(self._model_proto, path)


# Where a SentencePiece model normalizes nothing (this library's: `normalization_rule_name`
# "identity", as `normalize_text` has normalized the text already), its normalizer has an
# empty precompiled charsmap, and every SentencePiece op that loads it (every translate, every
# model server start) logs `normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty` to
# stderr, past any log level TensorFlow reads. The op gets instead the charsmap of one rule
# that no text meets: two U+FDD0 in a row (a noncharacter, reserved for a program's internal
# use) become one. Ids and detokenized text are unchanged (tests/test_sentencepiece.py).
_INERT_RULE = "FDD0 FDD0\tFDD0\n"


@functools.cache
def _inert_charsmap() -> bytes:
    """The precompiled charsmap of `_INERT_RULE`, compiled by SentencePiece's trainer."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2

    with tempfile.TemporaryDirectory() as directory:
        rule = Path(directory) / "rule.tsv"
        rule.write_text(_INERT_RULE, encoding="utf-8")
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(["a b c d e f g h"] * 10),
            model_writer=model,
            vocab_size=12,
            normalization_rule_tsv=str(rule),
            minloglevel=3,
        )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    return proto.normalizer_spec.precompiled_charsmap


def _quiet_model(model_proto: bytes) -> bytes:
    """`model_proto` with `_inert_charsmap` where its normalizer's charsmap is empty."""
    from google.protobuf import message
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model_proto)
    except message.DecodeError:
        return model_proto  # not a model: the op says so, naming the file (`read_...`)
    if proto.normalizer_spec.precompiled_charsmap:
        return model_proto
    proto.normalizer_spec.precompiled_charsmap = _inert_charsmap()
    return proto.SerializeToString()


class SentencepieceModel(tf.saved_model.experimental.TrackableResource):
    """A SentencePiece model proto as a TensorFlow resource, kept in a SavedModel.

    tensorflow-text's `SentencepieceTokenizer` creates its resource without a
    name, which makes it belong to the eager kernel that created it; every
    `tf.random.set_seed` (and so `keras.utils.set_random_seed`) clears the
    kernel cache and deletes it, and the tokenizer then fails with "Resource
    localhost/_0_SentencepieceOp/... does not exist" (tensorflow/text#570).
    A `shared_name` puts the resource in the resource manager instead, where it
    lives on; the name is the model's hash, so only identical models share one.
    For the same reason it is never destroyed (another tokenizer may share it):
    each distinct model stays in memory, a few hundred kB, until the process ends.
    The ops get the model with `_quiet_model`'s charsmap, so that loading it logs
    nothing.
    """

    def __init__(self, model_proto: bytes):
        super().__init__()
        self._model_proto = _quiet_model(model_proto)
        digest = hashlib.sha256(model_proto).hexdigest()[:32]
        self._shared_name = f"keras_transformer_sentencepiece_{digest}"
        _ = self.resource_handle  # creates the resource, so a bad proto fails here

    def _create_resource(self):
        return sentencepiece_ops.sentencepiece_op(
            model=self._model_proto, shared_name=self._shared_name
        )
