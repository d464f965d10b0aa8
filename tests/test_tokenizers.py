"""WordPiece tokenizers: round trips with accents, reserved ids, tf.function and SavedModel use."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from keras_transformer.tokenizers import (
    Tokenizer,
    learn_vocabulary,
    read_vocabulary,
    write_vocabulary,
)

PORTUGUESE = [
    "Não há razão para não começar já.",
    "A atenção é tudo de que você precisa.",
    "Ele disse: é possível, mas não é fácil.",
    "As crianças brincavam na praça ao pôr do sol.",
]
GERMAN = [
    "Die Straße ist nass, weil es regnet.",
    "Über den Bergen liegt schon Schnee.",
    "Grüße aus München, sagte er fröhlich.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
]


def _expected(text: str) -> str:
    """detokenize's form: lowercased, punctuation set off by spaces."""
    out = "".join(f" {c} " if not (c.isalnum() or c.isspace()) else c for c in text.lower())
    return " ".join(out.split())


@pytest.fixture(scope="module")
def tokenizer():
    # Repetition gives every word the counts the vocabulary learner needs.
    vocab = learn_vocabulary((PORTUGUESE + GERMAN) * 5, vocab_size=500, lower_thresh=1)
    return Tokenizer(vocab)


def test_vocabulary_starts_with_reserved_tokens(tokenizer, tmp_path):
    vocab = tokenizer.get_vocab()
    assert vocab[: len(RESERVED_TOKENS)] == RESERVED_TOKENS
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)
    path = write_vocabulary(vocab, tmp_path / "vocab.txt")
    assert read_vocabulary(path) == vocab
    assert Tokenizer(path).vocab_size == tokenizer.vocab_size == len(vocab)


@pytest.mark.parametrize(
    "sentences, accented",
    [(PORTUGUESE, "não"), (GERMAN, "über"), (GERMAN, "straße")],
    ids=["pt", "de", "de-sharp-s"],
)
def test_round_trip_keeps_accents(tokenizer, sentences, accented):
    ids = tokenizer.tokenize(tf.constant(sentences))
    assert ids.dtype == tf.int64
    rows = ids.to_list()
    assert all(row[0] == START_ID and row[-1] == END_ID for row in rows)
    assert all(UNK_ID not in row for row in rows)
    text = [t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy()]
    assert text == [_expected(s) for s in sentences]
    # Accents and ß survive lowercasing (case folding would write "strasse").
    assert any(accented in t.split() for t in text)


def test_unknown_word_maps_to_unk_and_lookup_shows_pieces(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["não ξξξ"]))
    assert UNK_ID in ids.to_list()[0]
    pieces = tokenizer.lookup(ids).to_list()[0]
    assert pieces[0] == b"[START]" and pieces[-1] == b"[END]" and b"[UNK]" in pieces


def test_nfc_normalization_makes_composed_and_decomposed_text_equal(tokenizer):
    composed = "não"  # U+00E3
    decomposed = "na\u0303o"  # a + combining tilde
    ids = tokenizer.tokenize(tf.constant([composed, decomposed])).to_list()
    assert ids[0] == ids[1]


def test_usable_inside_tf_function_and_saved_model(tokenizer, tmp_path):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return tokenizer.detokenize(tokenizer.tokenize(strings))

    expected = round_trip(tf.constant(GERMAN[:2])).numpy()
    tf.saved_model.save(tokenizer, str(tmp_path / "tok"))
    loaded = tf.saved_model.load(str(tmp_path / "tok"))
    again = loaded.detokenize(loaded.tokenize(tf.constant(GERMAN[:2]))).numpy()
    np.testing.assert_array_equal(again, expected)
    assert int(loaded.get_vocab_size()) == tokenizer.vocab_size


def test_empty_and_undecodable_inputs_still_tokenize(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["", b"\xff\xfe ok"])).to_list()
    assert ids[0] == [START_ID, END_ID]
    assert ids[1][0] == START_ID and ids[1][-1] == END_ID
