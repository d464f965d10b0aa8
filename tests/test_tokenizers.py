"""WordPiece tokenizers, and the run directory's tokenizers of either kind.

SentencePiece's own behaviour is tested in test_sentencepiece.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli, training
from keras_transformer.constants import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from keras_transformer.text import corpora
from keras_transformer.text.tokenizers import (
    SentencePieceTokenizer,
    Tokenizer,
    learn_vocabulary,
    read_vocabulary,
    write_vocabulary,
)
from keras_transformer.training import run_dir, tokenizer_files
from keras_transformer.training.config import TrainConfig
from tests.helpers import graph_op_types

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


def test_graphs_stay_small(tokenizer):
    # Every new tf.data iterator over a pipeline that tokenizes instantiates these graphs
    # again: `tf.where` on the ragged ids once made `tokenize` 2,005 nodes (1.4-2.6 s an
    # iterator, a tutorial epoch's main cost), ragged concat and `merge_dims` 637; it now
    # has 398, most of them tensorflow-text's own ragged checks.
    for method in (tokenizer.tokenize, tokenizer.detokenize, tokenizer.lookup):
        nodes = len(graph_op_types(method.get_concrete_function().graph.as_graph_def()))
        assert nodes < 450, f"{method.__name__}: {nodes} graph nodes"


def test_empty_and_undecodable_inputs_still_tokenize(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["", b"\xff\xfe ok"])).to_list()
    assert ids[0] == [START_ID, END_ID]
    assert ids[1][0] == START_ID and ids[1][-1] == END_ID


# ----------------------------------------------------------------------------- run directories


def _config(**settings) -> TrainConfig:
    return TrainConfig(vocab_size=400, vocab_lower_thresh=1, **settings)


@pytest.fixture(scope="module")
def train_pairs():
    written = [
        ("A man in a blue shirt is reading.", "Ein Mann im blauen Hemd liest."),
        ("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."),
        ("The street is wet, isn't it?", "Die Straße ist nass, nicht wahr?"),
    ]
    return written * 20 + corpora.demo_corpus(200, seed=2, source_lang="en", target_lang="de")


def _has_piece_with(tokenizer, text: str) -> bool:
    return any(text in piece for piece in tokenizer.get_vocab())


def _learned_files(run_dir) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}


def test_build_tokenizers_learns_sentencepiece_once_and_reuses_it(
    tmp_path, train_pairs, monkeypatch
):
    config = _config()
    assert (config.tokenizer, config.lower_case, config.subword_model) == (
        "sentencepiece",
        False,
        "unigram",
    )
    source, target = training.build_tokenizers(config, train_pairs, tmp_path)
    assert isinstance(source, SentencePieceTokenizer) and source is not target
    files = _learned_files(tmp_path)
    assert sorted(files) == [run_dir.SOURCE_SPM_FILE, run_dir.TARGET_SPM_FILE]
    # The German model learned German; the English one did not.
    assert _has_piece_with(target, "hundert") and not _has_piece_with(source, "hundert")
    assert _has_piece_with(source, "hundred") and not _has_piece_with(target, "hundred")
    sentence = tf.constant(["Die Straße ist nass, nicht wahr?"])
    assert target.detokenize(target.tokenize(sentence)).numpy()[0].decode() == (
        "Die Straße ist nass, nicht wahr?"
    )

    def must_not_learn(*args, **kwargs):
        raise AssertionError("a resumed run learned its tokenizer again")

    monkeypatch.setattr(tokenizer_files, "learn_sentencepiece_model", must_not_learn)
    again_source, again_target = training.build_tokenizers(config, train_pairs, tmp_path)
    assert _learned_files(tmp_path) == files
    ids = again_target.tokenize(sentence).to_list()
    assert ids == target.tokenize(sentence).to_list()
    # config.json's "tokenizer" section is what load_tokenizers rebuilds them from.
    settings = config.tokenizer_kwargs()
    assert settings == {
        "kind": "sentencepiece",
        "shared_vocab": False,
        "lower_case": False,
        "normalization_form": "NFC",
        "subword_model": "unigram",
        "vocab_size": 400,
    }
    run_dir.write_config(tmp_path, {"tokenizer": settings})
    loaded_source, loaded_target = run_dir.load_tokenizers(tmp_path)
    assert loaded_target.tokenize(sentence).to_list() == ids
    assert loaded_source.get_vocab() == source.get_vocab()


def test_shared_vocab_learns_one_joint_model(tmp_path, train_pairs):
    config = _config(shared_vocab=True, subword_model="bpe")
    source, target = training.build_tokenizers(config, train_pairs, tmp_path)
    assert source is target
    assert sorted(_learned_files(tmp_path)) == [run_dir.JOINT_SPM_FILE]
    assert _has_piece_with(source, "hundert") and _has_piece_with(source, "hundred")
    vocab = source.get_vocab()
    run_dir.write_config(tmp_path, {"tokenizer": config.tokenizer_kwargs()})
    loaded_source, loaded_target = run_dir.load_tokenizers(tmp_path)
    assert loaded_source is loaded_target and loaded_source.get_vocab() == vocab


@pytest.mark.parametrize("lower_case", [False, True], ids=["cased", "lowercased"])
def test_build_tokenizers_learns_wordpiece_when_asked(tmp_path, train_pairs, lower_case):
    config = _config(tokenizer="wordpiece", lower_case=lower_case)
    source, target = training.build_tokenizers(config, train_pairs, tmp_path)
    assert isinstance(source, Tokenizer) and isinstance(target, Tokenizer)
    assert sorted(_learned_files(tmp_path)) == [
        run_dir.SOURCE_VOCAB_FILE,
        run_dir.TARGET_VOCAB_FILE,
    ]
    text = target.detokenize(target.tokenize(tf.constant(["Die Straße ist nass."])))
    expected = "die straße ist nass ." if lower_case else "Die Straße ist nass ."
    assert text.numpy()[0].decode() == expected
    run_dir.write_config(tmp_path, {"tokenizer": config.tokenizer_kwargs()})
    loaded = run_dir.load_tokenizers(tmp_path)[1]
    assert loaded.detokenize(loaded.tokenize(tf.constant(["Die Straße ist nass."]))) == text


def test_run_directory_from_before_sentencepiece_loads_as_wordpiece(tmp_path, tokenizer):
    # What earlier versions wrote: no "kind", one vocabulary file per side.
    run_dir.write_config(
        tmp_path, {"model": {}, "tokenizer": {"lower_case": True, "normalization_form": "NFC"}}
    )
    tokenizer.save_vocabulary(tmp_path / "vocab_source.txt")
    tokenizer.save_vocabulary(tmp_path / "vocab_target.txt")
    source, target = run_dir.load_tokenizers(tmp_path)
    assert isinstance(source, Tokenizer) and isinstance(target, Tokenizer)
    assert source.get_vocab() == tokenizer.get_vocab()
    ids = target.tokenize(tf.constant(["Die Straße ist nass."]))
    assert target.detokenize(ids).numpy()[0].decode() == "die straße ist nass ."


def test_missing_or_broken_tokenizer_files_are_named(tmp_path, tokenizer):
    settings = TrainConfig().tokenizer_kwargs()
    run_dir.write_config(tmp_path, {"tokenizer": settings})
    with pytest.raises(FileNotFoundError, match=run_dir.SOURCE_SPM_FILE):
        run_dir.load_tokenizers(tmp_path)
    (tmp_path / run_dir.SOURCE_SPM_FILE).write_bytes(b"\x00 not a model")
    (tmp_path / run_dir.TARGET_SPM_FILE).write_bytes(b"")
    with pytest.raises(ValueError, match=f"{run_dir.SOURCE_SPM_FILE} is not a valid"):
        run_dir.load_tokenizers(tmp_path)
    run_dir.write_config(tmp_path, {"tokenizer": {"kind": "bytes"}})
    with pytest.raises(ValueError, match="Unknown tokenizer kind 'bytes'"):
        run_dir.load_tokenizers(tmp_path)
    run_dir.write_config(tmp_path, {"tokenizer": {"lower_case": True}})
    (tmp_path / run_dir.SOURCE_VOCAB_FILE).write_text("hello\n", encoding="utf-8")
    (tmp_path / run_dir.TARGET_VOCAB_FILE).write_text("hello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{run_dir.SOURCE_VOCAB_FILE} must start with"):
        run_dir.load_tokenizers(tmp_path)


def test_tokenizer_settings_are_validated_and_are_flags():
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        TrainConfig(tokenizer="bert").validate()
    with pytest.raises(ValueError, match="subword_model must be one of"):
        TrainConfig(subword_model="char").validate()
    with pytest.raises(ValueError, match="normalization_form"):
        TrainConfig(normalization_form="NFX").validate()
    with pytest.raises(ValueError, match="vocab_size must be at least 261"):
        TrainConfig(vocab_size=200).validate()
    TrainConfig(vocab_size=200, tokenizer="wordpiece").validate()
    flags = ["--tokenizer", "wordpiece", "--shared-vocab", "true", "--subword-model", "bpe"]
    args = cli.build_parser().parse_args(["train", "--run-dir", "x", *flags])
    config = cli.config_from_args(args)
    assert (config.tokenizer, config.shared_vocab, config.subword_model) == (
        "wordpiece",
        True,
        "bpe",
    )
