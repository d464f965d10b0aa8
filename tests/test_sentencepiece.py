"""SentencePiece tokenizers: reversible round trips, reserved ids, odd inputs, SavedModel."""

import io
import json
import subprocess
import sys

import keras
import pytest
import sentencepiece
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.constants import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from keras_transformer.text import corpora
from keras_transformer.text.tokenizers import (
    SentencePieceTokenizer,
    learn_sentencepiece_model,
    normalize_text,
    write_sentencepiece_model,
)
from tests.helpers import graph_op_types

# Training text: hand-written sentences in four languages, and numbers written
# out in the same four (the built-in corpus), a few hundred sentences in all.
WRITTEN = [
    "A menina está a brincar na praça com o cão.",
    "Não há razão para não começar já, disse a professora.",
    "As crianças comem pão e bebem água ao pôr do sol.",
    "Ele não sabe se a avó já chegou à estação.",
    "O homem de camisa azul está a ler um jornal.",
    "Die Straße ist nass, weil es den ganzen Tag regnet.",
    "Ein Mann mit einem roten Hut läuft über die Brücke.",
    "Zwei Hunde spielen im Schnee vor dem großen Haus.",
    "Die Kinder grüßen ihre Großmutter am Bahnhof.",
    "Eine Frau fährt mit dem Fahrrad durch die Stadt.",
    "Le garçon mange une pomme dans le jardin de l'école.",
    "Une femme âgée traverse la rue avec son chien.",
    "Les enfants jouent au football près de la forêt.",
    "C'est un très beau château, n'est-ce pas ?",
    "Il a dit : « Je reviendrai demain matin. »",
    "A man in a blue shirt is reading a newspaper.",
    "Two dogs are playing in the snow near a big house.",
    "There's a woman riding a bike through the city.",
    "The children don't want to leave the beach yet.",
    'She said, "It\'s a well-known place for tourists."',
]
DEMO_SENTENCES = [
    sentence
    for languages in (("en", "pt"), ("de", "fr"))
    for pair in corpora.demo_corpus(80, seed=3, source_lang=languages[0], target_lang=languages[1])
    for sentence in pair
]
TRAINING_TEXT = WRITTEN * 3 + DEMO_SENTENCES

# Round trips: sentences with accents, ß, both apostrophes, hyphens, quotes,
# digits and emoji, and words the training text never had.
ROUND_TRIP = {
    "pt": [
        "Não há razão para não começar já.",
        "A atenção é tudo de que você precisa — disse ela às 15h30.",
        "O Zé comprou 3 pães-de-ló por 4,50 € 🎂!",
        "Ele perguntou: “Você viu o pôr do sol?”",
    ],
    "de": [
        "Die Straße ist nass, weil es regnet.",
        "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
        "Er sagte: „Das Xylophon klingt überraschend gut.“ 🎶",
        "Am 3. Oktober 1990 – also vor 35 Jahren – wurde gefeiert.",
    ],
    "fr": [
        "Qu’est-ce que c’est ?",
        "L'hôtel « Belle Époque » ouvre à 8 h 15.",
        "Aujourd’hui, l’œuvre d’art coûte 1 200 € ; c’est cher ! 😮",
        "Le garçon a dit : « Ça va très bien, merci. »",
    ],
    "en": [
        "There's a man who doesn't know what he’s doing.",
        'She said, "It\'s a well-known place" and left at 9:45 p.m.',
        "A fifty-two-year-old zookeeper fed 17 giraffes 🦒🦒 today.",
        "Naïve café owners in Zürich don’t serve crème brûlée.",
    ],
}
ALL_ROUND_TRIP = [sentence for sentences in ROUND_TRIP.values() for sentence in sentences]
EMOJI = "Família 👨‍👩‍👧 em 🇵🇹, 🤖 e ✨."


def _normalized(strings, lower_case=False):
    """What a tokenizer with these settings makes of `strings`, as Python strings."""
    values = normalize_text(
        tf.constant(strings), lower_case, "NFC", collapse_whitespace=True
    ).numpy()
    return [value.decode("utf-8") for value in values]


def _texts(tensor) -> list[str]:
    return [value.decode("utf-8") for value in tensor.numpy()]


@pytest.fixture(scope="module")
def unigram_proto():
    return learn_sentencepiece_model(TRAINING_TEXT, vocab_size=500)


@pytest.fixture(scope="module")
def tokenizer(unigram_proto):
    return SentencePieceTokenizer(unigram_proto, name="tokenizer")


def test_reserved_ids_are_the_first_four_pieces(tokenizer):
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)
    vocab = tokenizer.get_vocab()
    assert vocab[:4] == RESERVED_TOKENS
    # Then the 256 byte pieces that byte fallback spells rare characters with.
    assert vocab[4] == "<0x00>" and vocab[259] == "<0xFF>"
    assert tokenizer.vocab_size == len(vocab) == int(tokenizer.get_vocab_size()) == 500
    pieces = tokenizer.lookup(tf.ragged.constant([[0, 1, 2, 3]], tf.int64)).to_list()
    assert pieces == [[token.encode() for token in RESERVED_TOKENS]]


def test_learned_with_the_requested_options(unigram_proto):
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(unigram_proto)
    assert model.trainer_spec.model_type == sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    assert model.trainer_spec.byte_fallback
    # The tokenizer's TensorFlow normalization is the only one.
    assert model.normalizer_spec.name == "identity"
    assert [p.piece for p in model.pieces[:4]] == RESERVED_TOKENS


@pytest.mark.parametrize("language", sorted(ROUND_TRIP))
def test_round_trip_gives_back_the_normalized_text(tokenizer, language):
    sentences = ROUND_TRIP[language]
    ids = tokenizer.tokenize(tf.constant(sentences))
    assert ids.dtype == tf.int64
    rows = ids.to_list()
    assert all(row[0] == START_ID and row[-1] == END_ID for row in rows)
    # Unseen characters are spelled in bytes, never [UNK].
    assert all(UNK_ID not in row and PAD_ID not in row for row in rows)
    text = _texts(tokenizer.detokenize(ids))
    assert text == _normalized(sentences)
    # These sentences are NFC already and singly spaced: normalization leaves
    # them as they are, so the round trip gives back exactly what came in.
    assert text == sentences


def test_output_is_cased_and_keeps_its_punctuation(tokenizer):
    text = _texts(tokenizer.detokenize(tokenizer.tokenize(tf.constant(["Die Straße, O'Neil!"]))))
    assert text == ["Die Straße, O'Neil!"]


def test_emoji_round_trip_through_byte_pieces(tokenizer):
    ids = tokenizer.tokenize(tf.constant([EMOJI]))
    pieces = [piece.decode("utf-8") for piece in tokenizer.lookup(ids).to_list()[0]]
    assert "<0xF0>" in pieces  # the first byte of a four-byte emoji
    assert _texts(tokenizer.detokenize(ids)) == [EMOJI]


def test_normalization_is_documented_by_what_it_changes(tokenizer):
    odd = [
        "  « Bonjour\u00a0! »\t\n",  # outer whitespace, no-break space, tab
        "na\u0303o",  # a + combining tilde
        "one\u2581two",  # SentencePiece's own word mark
        "ﬁn",  # a compatibility ligature: NFC keeps it (NFKC would write "fin")
    ]
    expected = ["« Bonjour ! »", "não", "one two", "ﬁn"]
    assert _normalized(odd) == expected
    assert _texts(tokenizer.normalize(tf.constant(odd))) == expected
    assert _texts(tokenizer.detokenize(tokenizer.tokenize(tf.constant(odd)))) == expected


def test_lower_case_option(unigram_proto):
    lowering = SentencePieceTokenizer(unigram_proto, lower_case=True)
    sentences = ROUND_TRIP["de"][:2]
    text = _texts(lowering.detokenize(lowering.tokenize(tf.constant(sentences))))
    assert text == _normalized(sentences, lower_case=True)
    assert text[0] == "die straße ist nass, weil es regnet."


def test_empty_whitespace_and_undecodable_rows_do_not_spoil_the_batch(tokenizer):
    good = "Ein Mann läuft."
    rows = ["", " \t\u00a0 ", b"caf\xe9 \xff ok", good]
    ids = tokenizer.tokenize(tf.constant(rows))
    assert ids.to_list()[:2] == [[START_ID, END_ID], [START_ID, END_ID]]
    assert ids.to_list()[3] == tokenizer.tokenize(tf.constant([good])).to_list()[0]
    assert _texts(tokenizer.detokenize(ids)) == ["", "", "caf\ufffd \ufffd ok", good]


def test_zero_rows(tokenizer):
    ids = tokenizer.tokenize(tf.constant([], tf.string))
    assert ids.shape[0] == 0 and ids.dtype == tf.int64
    assert tokenizer.detokenize(ids).shape == (0,)
    assert tokenizer.lookup(ids).shape[0] == 0


def test_detokenize_drops_reserved_and_out_of_range_ids(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["Zwei Hunde spielen."])).to_list()[0]
    noisy = [ids[:3] + [PAD_ID, UNK_ID, START_ID, tokenizer.vocab_size + 7] + ids[3:] + [PAD_ID]]
    text = _texts(tokenizer.detokenize(tf.ragged.constant(noisy, tf.int64)))
    assert text == ["Zwei Hunde spielen."]


def test_bpe_option_round_trips_too():
    proto = learn_sentencepiece_model(TRAINING_TEXT, vocab_size=500, model_type="bpe")
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    assert model.trainer_spec.model_type == sentencepiece_model_pb2.TrainerSpec.BPE
    bpe = SentencePieceTokenizer(proto)
    text = _texts(bpe.detokenize(bpe.tokenize(tf.constant(ALL_ROUND_TRIP + [EMOJI]))))
    assert text == ALL_ROUND_TRIP + [EMOJI]


@pytest.mark.parametrize("model_type, alpha", [("unigram", 0.3), ("bpe", 0.2)])
def test_sampled_segmentations_vary_and_round_trip(model_type, alpha):
    proto = learn_sentencepiece_model(TRAINING_TEXT, vocab_size=500, model_type=model_type)
    sampler = SentencePieceTokenizer(proto)
    sentences = ALL_ROUND_TRIP + [EMOJI]
    best = sampler.tokenize(tf.constant(sentences)).to_list()
    draws = [sampler.tokenize_sampled(tf.constant(sentences), alpha) for _ in range(8)]
    for ids in draws:
        rows = ids.to_list()
        assert all(row[0] == START_ID and row[-1] == END_ID for row in rows)
        assert all(UNK_ID not in row and PAD_ID not in row for row in rows)
        # Every segmentation spells the same text as the best one.
        assert _texts(sampler.detokenize(ids)) == _normalized(sentences)
    # Segmentations differ from draw to draw and from the best one, ...
    segmentations = {tuple(map(tuple, ids.to_list())) for ids in draws}
    assert len(segmentations) == len(draws)
    assert all(ids.to_list() != best for ids in draws)
    # ... and the best one stays what tokenize gives, sampling or not.
    assert sampler.tokenize(tf.constant(sentences)).to_list() == best


def test_sampling_runs_in_tf_data_and_refuses_a_bad_alpha(tokenizer):
    strings = tf.data.Dataset.from_tensor_slices(ALL_ROUND_TRIP).batch(4)
    sampled = strings.map(lambda s: tokenizer.tokenize_sampled(s, 0.3)).repeat(2)
    texts = [text for ids in sampled for text in _texts(tokenizer.detokenize(ids))]
    assert texts == _normalized(ALL_ROUND_TRIP) * 2
    for alpha in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\]"):
            tokenizer.tokenize_sampled(tf.constant(["x"]), alpha)


def test_joint_model_serves_both_languages():
    english = [s for s in DEMO_SENTENCES[0::2] if s.isascii()]
    portuguese = DEMO_SENTENCES[1::2]
    joint = SentencePieceTokenizer(learn_sentencepiece_model(english + portuguese, 400))
    english_only = SentencePieceTokenizer(learn_sentencepiece_model(english, 400))
    # "cento e vinte" is Portuguese the English model never saw: byte and
    # letter pieces there, learned pieces in the joint model.
    source, target = ["one hundred and twenty"], ["cento e vinte"]
    assert len(joint.tokenize(tf.constant(target))[0]) < len(
        english_only.tokenize(tf.constant(target))[0]
    )
    for text in (source, target):
        assert _texts(joint.detokenize(joint.tokenize(tf.constant(text)))) == text


def test_learning_errors_name_the_argument():
    with pytest.raises(ValueError, match="vocab_size"):
        learn_sentencepiece_model(TRAINING_TEXT, vocab_size=200)
    # Enough for the reserved and byte pieces, too few for the text's characters.
    with pytest.raises(ValueError, match="vocab_size=270 is too small"):
        learn_sentencepiece_model(TRAINING_TEXT, vocab_size=270)
    with pytest.raises(ValueError, match="model_type"):
        learn_sentencepiece_model(TRAINING_TEXT, model_type="char")
    with pytest.raises(ValueError, match="No training text"):
        learn_sentencepiece_model(["", "  "], vocab_size=300)


def test_bad_model_files_are_named(tmp_path, unigram_proto):
    with pytest.raises(FileNotFoundError, match="missing.model"):
        SentencePieceTokenizer(tmp_path / "missing.model")
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="garbage.model is not a valid SentencePiece model"):
        SentencePieceTokenizer(garbage)
    # A model learned with SentencePiece's own reserved pieces (<unk> at 0)
    # would pad with a real token.
    foreign = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(WRITTEN), model_writer=foreign, vocab_size=100, minloglevel=2
    )
    path = write_sentencepiece_model(foreign.getvalue(), tmp_path / "foreign.model")
    with pytest.raises(ValueError, match=r"foreign.model must have the pieces"):
        SentencePieceTokenizer(path)
    assert not list(tmp_path.glob("*.tmp"))


def test_usable_in_tf_function_and_tf_data(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return tokenizer.detokenize(tokenizer.tokenize(strings))

    assert _texts(round_trip(tf.constant(ALL_ROUND_TRIP))) == ALL_ROUND_TRIP
    assert round_trip(tf.constant([], tf.string)).shape == (0,)
    rows = tf.data.Dataset.from_tensor_slices(ALL_ROUND_TRIP).batch(5).map(tokenizer.tokenize)
    eager = tokenizer.tokenize(tf.constant(ALL_ROUND_TRIP)).to_list()
    assert [row for batch in rows for row in batch.to_list()] == eager


def test_graphs_stay_small(tokenizer):
    # As for WordPiece (test_tokenizers.py): `tf.where` on ragged ids once made `lookup`
    # 1,390 nodes where it now has 15.
    for method in (tokenizer.tokenize, tokenizer.detokenize, tokenizer.lookup):
        nodes = len(graph_op_types(method.get_concrete_function().graph.as_graph_def()))
        assert nodes < 1000, f"{method.__name__}: {nodes} graph nodes"


def test_survives_random_seeding_after_it_was_made(unigram_proto, tmp_path):
    # tensorflow-text's own SentencepieceTokenizer loses its model when
    # tf.random.set_seed clears the eager kernel cache (tensorflow/text#570).
    made_first = SentencePieceTokenizer(unigram_proto)
    expected = made_first.tokenize(tf.constant(ALL_ROUND_TRIP)).to_list()
    tf.saved_model.save(made_first, str(tmp_path / "tokenizer"))
    loaded = tf.saved_model.load(str(tmp_path / "tokenizer"))
    keras.utils.set_random_seed(1)
    tf.random.set_seed(2)
    for tokenizer in (made_first, loaded):
        ids = tokenizer.tokenize(tf.constant(ALL_ROUND_TRIP))
        assert ids.to_list() == expected
        assert _texts(tokenizer.detokenize(ids)) == ALL_ROUND_TRIP


# Runs in a fresh interpreter where `import keras_transformer` fails.
FRESH_PROCESS = r"""
import json, sys
sys.modules["keras_transformer"] = None
import tensorflow as tf
import tensorflow_text  # noqa: F401
loaded = tf.saved_model.load(sys.argv[1])
texts = [t.encode("latin-1") for t in json.load(sys.stdin)]
ids = loaded.tokenize(tf.constant(texts, tf.string, shape=[len(texts)]))
json.dump(
    {
        "ids": ids.to_list(),
        "text": [t.decode("utf-8") for t in loaded.detokenize(ids).numpy()],
        "normalized": [t.decode("utf-8") for t in loaded.normalize(tf.constant(texts)).numpy()],
        "vocab_size": int(loaded.get_vocab_size()),
        "zero_rows": loaded.detokenize(loaded.tokenize(tf.constant([], tf.string))).shape[0],
    },
    sys.stdout,
)
"""


def test_saved_model_runs_in_a_fresh_process_without_the_library(tokenizer, tmp_path):
    path = tmp_path / "tokenizer"
    tf.saved_model.save(tokenizer, str(path))
    texts = ALL_ROUND_TRIP + [EMOJI, "", "one \xff\xfe two"]  # the last as raw bytes
    run = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(path)],
        input=json.dumps([t.encode("utf-8").decode("latin-1") for t in texts[:-1]] + texts[-1:]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    served = json.loads(run.stdout)
    raw = [t.encode("utf-8") for t in texts[:-1]] + [texts[-1].encode("latin-1")]
    ids = tokenizer.tokenize(tf.constant(raw))
    assert served["ids"] == ids.to_list()
    assert served["text"] == _texts(tokenizer.detokenize(ids))
    assert served["text"] == ALL_ROUND_TRIP + [EMOJI, "", "one \ufffd\ufffd two"]
    assert served["normalized"] == served["text"]
    assert served["vocab_size"] == tokenizer.vocab_size
    assert served["zero_rows"] == 0
    # Loading the ops logs nothing: SentencePiece's "precompiled_charsmap is empty" line
    # came with every load of a model that normalizes nothing (`_quiet_model`).
    assert "precompiled_charsmap" not in run.stderr, run.stderr


def test_the_ops_model_gives_the_learned_model_s_ids_and_text(unigram_proto):
    """The ops load the model with an inert charsmap in place of its empty one (so that
    they log nothing): the ids and the text are those of the model as learned, run by
    tensorflow-text's own tokenizer on the same normalized text."""
    import tensorflow_text

    texts = ALL_ROUND_TRIP + [EMOJI, "", "  two  spaces ", "\ufdd0 x \ufdd0\ufdd1 y"]
    normalized = tf.constant(_normalized(texts))
    learned = tensorflow_text.SentencepieceTokenizer(model=unigram_proto)
    ours = SentencePieceTokenizer(unigram_proto)
    expected = learned.tokenize(normalized)
    ids = ours.tokenize(tf.constant(texts))[:, 1:-1]  # without [START] and [END]
    assert ids.to_list() == tf.cast(expected, tf.int64).to_list()
    assert _texts(ours.detokenize(ids)) == _texts(learned.detokenize(expected))
