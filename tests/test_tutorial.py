"""The TensorFlow tutorial's own code, run against the library.

"Neural machine translation with a Transformer and Keras" (tensorflow/text,
docs/tutorials/transformer.ipynb, as of commit 17c38bf0148) is replayed cell
by cell, in order, in one namespace, as a notebook kernel runs it. Only two
kinds of cells differ from the notebook (trailing whitespace aside):

- the class and function definitions, each replaced by an import of the same
  names from `keras_transformer.tutorial`;
- the downloads (TED talks from tfds, the tokenizers' SavedModel), replaced by
  small stand-ins: a few sentence pairs (the ones the tutorial translates and
  others), and a SavedModel of WordPiece tokenizers over their words with the
  converter's interface, which cell 27 loads unchanged. The pip installs and
  the licence cell are left out.

The tests then assert what the tutorial's text says each cell shows (shapes,
the Keras mask, causality), and more than it checks: calls without explicit
masks are padding-invariant through every layer, the translator finds the
tokens of the tutorial's own decoding loop, and the export answers in a process
that imports only tensorflow and tensorflow_text.
"""

import ast
import contextlib
import os
import re
import subprocess
import sys
import warnings

import keras
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.constants import END_ID, RESERVED_TOKENS, START_ID  # noqa: E402
from keras_transformer.text.tokenizers import Tokenizer  # noqa: E402

# -- the notebook's code cells: (cell number in the notebook, source) ---------------------

CELLS = [
    (
        16,
        """
import logging
import time

import numpy as np
import matplotlib.pyplot as plt

import tensorflow_datasets as tfds
import tensorflow as tf

import tensorflow_text
""",
    ),
    (
        20,
        """
examples, metadata = stand_in_examples(), None  # for tfds.load('ted_hrlr_translate/pt_to_en', ...)

train_examples, val_examples = examples['train'], examples['validation']
""",
    ),
    (
        22,
        """
for pt_examples, en_examples in train_examples.batch(3).take(1):
  print('> Examples in Portuguese:')
  for pt in pt_examples.numpy():
    print(pt.decode('utf-8'))
  print()

  print('> Examples in English:')
  for en in en_examples.numpy():
    print(en.decode('utf-8'))
""",
    ),
    (
        26,
        """
model_name = 'ted_hrlr_translate_pt_en_converter'
save_stand_in_tokenizers(model_name)  # for tf.keras.utils.get_file(f'{model_name}.zip', ...)
""",
    ),
    (
        27,
        """
tokenizers = tf.saved_model.load(model_name)
""",
    ),
    (
        29,
        """
[item for item in dir(tokenizers.en) if not item.startswith('_')]
""",
    ),
    (
        31,
        """
print('> This is a batch of strings:')
for en in en_examples.numpy():
  print(en.decode('utf-8'))
""",
    ),
    (
        32,
        """
encoded = tokenizers.en.tokenize(en_examples)

print('> This is a padded-batch of token IDs:')
for row in encoded.to_list():
  print(row)
""",
    ),
    (
        34,
        """
round_trip = tokenizers.en.detokenize(encoded)

print('> This is human-readable text:')
for line in round_trip.numpy():
  print(line.decode('utf-8'))
""",
    ),
    (
        36,
        """
print('> This is the text split into tokens:')
tokens = tokenizers.en.lookup(encoded)
tokens
""",
    ),
    (
        39,
        """
lengths = []

for pt_examples, en_examples in train_examples.batch(1024):
  pt_tokens = tokenizers.pt.tokenize(pt_examples)
  lengths.append(pt_tokens.row_lengths())

  en_tokens = tokenizers.en.tokenize(en_examples)
  lengths.append(en_tokens.row_lengths())
  print('.', end='', flush=True)
""",
    ),
    (
        40,
        """
all_lengths = np.concatenate(lengths)

plt.hist(all_lengths, np.linspace(0, 500, 101))
plt.ylim(plt.ylim())
max_length = max(all_lengths)
plt.plot([max_length, max_length], plt.ylim())
plt.title(f'Maximum tokens per example: {max_length}');
""",
    ),
    (
        43,
        """
MAX_TOKENS=128
def prepare_batch(pt, en):
    pt = tokenizers.pt.tokenize(pt)      # Output is ragged.
    pt = pt[:, :MAX_TOKENS]    # Trim to MAX_TOKENS.
    pt = pt.to_tensor()  # Convert to 0-padded dense Tensor

    en = tokenizers.en.tokenize(en)
    en = en[:, :(MAX_TOKENS+1)]
    en_inputs = en[:, :-1].to_tensor()  # Drop the [END] tokens
    en_labels = en[:, 1:].to_tensor()   # Drop the [START] tokens

    return (pt, en_inputs), en_labels
""",
    ),
    (
        45,
        """
BUFFER_SIZE = 20000
BATCH_SIZE = 64
""",
    ),
    (
        46,
        """
def make_batches(ds):
  return (
      ds
      .shuffle(BUFFER_SIZE)
      .batch(BATCH_SIZE)
      .map(prepare_batch, tf.data.AUTOTUNE)
      .prefetch(buffer_size=tf.data.AUTOTUNE))
""",
    ),
    (
        49,
        """
# Create training and validation set batches.
train_batches = make_batches(train_examples)
val_batches = make_batches(val_examples)
""",
    ),
    (
        53,
        """
for (pt, en), en_labels in train_batches.take(1):
  break

print(pt.shape)
print(en.shape)
print(en_labels.shape)
""",
    ),
    (
        55,
        """
print(en[0][:10])
print(en_labels[0][:10])
""",
    ),
    (
        63,
        """
from keras_transformer.tutorial import positional_encoding
""",
    ),
    (
        65,
        """
#@title
pos_encoding = positional_encoding(length=2048, depth=512)

# Check the shape.
print(pos_encoding.shape)

# Plot the dimensions.
plt.pcolormesh(pos_encoding.numpy().T, cmap='RdBu')
plt.ylabel('Depth')
plt.xlabel('Position')
plt.colorbar()
plt.show()
""",
    ),
    (
        67,
        """
#@title
pos_encoding/=tf.norm(pos_encoding, axis=1, keepdims=True)
p = pos_encoding[1000]
dots = tf.einsum('pd,d -> p', pos_encoding, p)
plt.subplot(2,1,1)
plt.plot(dots)
plt.ylim([0,1])
plt.plot([950, 950, float('nan'), 1050, 1050],
         [0,1,float('nan'),0,1], color='k', label='Zoom')
plt.legend()
plt.subplot(2,1,2)
plt.plot(dots)
plt.xlim([950, 1050])
plt.ylim([0,1])
""",
    ),
    (
        69,
        """
from keras_transformer.tutorial import PositionalEmbedding
""",
    ),
    (
        71,
        """
embed_pt = PositionalEmbedding(vocab_size=tokenizers.pt.get_vocab_size().numpy(), d_model=512)
embed_en = PositionalEmbedding(vocab_size=tokenizers.en.get_vocab_size().numpy(), d_model=512)

pt_emb = embed_pt(pt)
en_emb = embed_en(en)
""",
    ),
    (
        72,
        """
en_emb._keras_mask
""",
    ),
    (
        78,
        """
from keras_transformer.tutorial import BaseAttention
""",
    ),
    (
        85,
        """
from keras_transformer.tutorial import CrossAttention
""",
    ),
    (
        91,
        """
sample_ca = CrossAttention(num_heads=2, key_dim=512)

print(pt_emb.shape)
print(en_emb.shape)
print(sample_ca(en_emb, pt_emb).shape)
""",
    ),
    (
        98,
        """
from keras_transformer.tutorial import GlobalSelfAttention
""",
    ),
    (
        99,
        """
sample_gsa = GlobalSelfAttention(num_heads=2, key_dim=512)

print(pt_emb.shape)
print(sample_gsa(pt_emb).shape)
""",
    ),
    (
        112,
        """
from keras_transformer.tutorial import CausalSelfAttention
""",
    ),
    (
        118,
        """
sample_csa = CausalSelfAttention(num_heads=2, key_dim=512)

print(en_emb.shape)
print(sample_csa(en_emb).shape)
""",
    ),
    (
        120,
        """
out1 = sample_csa(embed_en(en[:, :3]))
out2 = sample_csa(embed_en(en))[:, :3]

tf.reduce_max(abs(out1 - out2)).numpy()
""",
    ),
    (
        126,
        """
from keras_transformer.tutorial import FeedForward
""",
    ),
    (
        128,
        """
sample_ffn = FeedForward(512, 2048)

print(en_emb.shape)
print(sample_ffn(en_emb).shape)
""",
    ),
    (
        133,
        """
from keras_transformer.tutorial import EncoderLayer
""",
    ),
    (
        135,
        """
sample_encoder_layer = EncoderLayer(d_model=512, num_heads=8, dff=2048)

print(pt_emb.shape)
print(sample_encoder_layer(pt_emb).shape)
""",
    ),
    (
        140,
        """
from keras_transformer.tutorial import Encoder
""",
    ),
    (
        142,
        """
# Instantiate the encoder.
sample_encoder = Encoder(num_layers=4,
                         d_model=512,
                         num_heads=8,
                         dff=2048,
                         vocab_size=8500)

sample_encoder_output = sample_encoder(pt, training=False)

# Print the shape.
print(pt.shape)
print(sample_encoder_output.shape)  # Shape `(batch_size, input_seq_len, d_model)`.
""",
    ),
    (
        146,
        """
from keras_transformer.tutorial import DecoderLayer
""",
    ),
    (
        148,
        """
sample_decoder_layer = DecoderLayer(d_model=512, num_heads=8, dff=2048)

sample_decoder_layer_output = sample_decoder_layer(
    x=en_emb, context=pt_emb)

print(en_emb.shape)
print(pt_emb.shape)
print(sample_decoder_layer_output.shape)  # `(batch_size, seq_len, d_model)`
""",
    ),
    (
        153,
        """
from keras_transformer.tutorial import Decoder
""",
    ),
    (
        155,
        """
# Instantiate the decoder.
sample_decoder = Decoder(num_layers=4,
                         d_model=512,
                         num_heads=8,
                         dff=2048,
                         vocab_size=8000)

output = sample_decoder(
    x=en,
    context=pt_emb)

# Print the shapes.
print(en.shape)
print(pt_emb.shape)
print(output.shape)
""",
    ),
    (
        156,
        """
sample_decoder.last_attn_scores.shape  # (batch, heads, target_seq, input_seq)
""",
    ),
    (
        164,
        """
from keras_transformer.tutorial import Transformer
""",
    ),
    (
        167,
        """
num_layers = 4
d_model = 128
dff = 512
num_heads = 8
dropout_rate = 0.1
""",
    ),
    (
        170,
        """
transformer = Transformer(
    num_layers=num_layers,
    d_model=d_model,
    num_heads=num_heads,
    dff=dff,
    input_vocab_size=tokenizers.pt.get_vocab_size().numpy(),
    target_vocab_size=tokenizers.en.get_vocab_size().numpy(),
    dropout_rate=dropout_rate)
""",
    ),
    (
        172,
        """
output = transformer((pt, en))

print(en.shape)
print(pt.shape)
print(output.shape)
""",
    ),
    (
        173,
        """
attn_scores = transformer.decoder.dec_layers[-1].last_attn_scores
print(attn_scores.shape)  # (batch, heads, target_seq, input_seq)
""",
    ),
    (
        175,
        """
transformer.summary()
""",
    ),
    (
        179,
        """
from keras_transformer.tutorial import CustomSchedule
""",
    ),
    (
        181,
        """
learning_rate = CustomSchedule(d_model)

optimizer = tf.keras.optimizers.Adam(learning_rate, beta_1=0.9, beta_2=0.98,
                                     epsilon=1e-9)
""",
    ),
    (
        183,
        """
plt.plot(learning_rate(tf.range(40000, dtype=tf.float32)))
plt.ylabel('Learning Rate')
plt.xlabel('Train Step')
""",
    ),
    (
        186,
        """
from keras_transformer.tutorial import masked_accuracy, masked_loss
""",
    ),
    (
        189,
        """
transformer.compile(
    loss=masked_loss,
    optimizer=optimizer,
    metrics=[masked_accuracy])
""",
    ),
    (
        190,
        """
transformer.fit(train_batches,
                epochs=20,
                validation_data=val_batches)
""",
    ),
    (
        193,
        """
from keras_transformer.tutorial import Translator
""",
    ),
    (
        196,
        """
translator = Translator(tokenizers, transformer)
""",
    ),
    (
        197,
        """
def print_translation(sentence, tokens, ground_truth):
  print(f'{"Input:":15s}: {sentence}')
  print(f'{"Prediction":15s}: {tokens.numpy().decode("utf-8")}')
  print(f'{"Ground truth":15s}: {ground_truth}')
""",
    ),
    (
        199,
        """
sentence = 'este é um problema que temos que resolver.'
ground_truth = 'this is a problem we have to solve .'

translated_text, translated_tokens, attention_weights = translator(
    tf.constant(sentence))
print_translation(sentence, translated_text, ground_truth)
""",
    ),
    (
        201,
        """
sentence = 'os meus vizinhos ouviram sobre esta ideia.'
ground_truth = 'and my neighboring homes heard about this idea .'

translated_text, translated_tokens, attention_weights = translator(
    tf.constant(sentence))
print_translation(sentence, translated_text, ground_truth)
""",
    ),
    (
        203,
        """
sentence = 'vou então muito rapidamente partilhar convosco algumas histórias de algumas coisas mágicas que aconteceram.'
ground_truth = "so i'll just share with you some stories very quickly of some magical things that have happened."

translated_text, translated_tokens, attention_weights = translator(
    tf.constant(sentence))
print_translation(sentence, translated_text, ground_truth)
""",  # noqa: E501
    ),
    (
        206,
        """
sentence = 'este é o primeiro livro que eu fiz.'
ground_truth = "this is the first book i've ever done."

translated_text, translated_tokens, attention_weights = translator(
    tf.constant(sentence))
print_translation(sentence, translated_text, ground_truth)
""",
    ),
    (
        208,
        """
from keras_transformer.tutorial import plot_attention_head
""",
    ),
    (
        209,
        """
head = 0
# Shape: `(batch=1, num_heads, seq_len_q, seq_len_k)`.
attention_heads = tf.squeeze(attention_weights, 0)
attention = attention_heads[head]
attention.shape
""",
    ),
    (
        211,
        """
in_tokens = tf.convert_to_tensor([sentence])
in_tokens = tokenizers.pt.tokenize(in_tokens).to_tensor()
in_tokens = tokenizers.pt.lookup(in_tokens)[0]
in_tokens
""",
    ),
    (
        213,
        """
translated_tokens
""",
    ),
    (
        214,
        """
plot_attention_head(in_tokens, translated_tokens, attention)
""",
    ),
    (
        215,
        """
from keras_transformer.tutorial import plot_attention_weights
""",
    ),
    (
        216,
        """
plot_attention_weights(sentence,
                       translated_tokens,
                       attention_weights[0])
""",
    ),
    (
        218,
        """
sentence = 'Eu li sobre triceratops na enciclopédia.'
ground_truth = 'I read about triceratops in the encyclopedia.'

translated_text, translated_tokens, attention_weights = translator(
    tf.constant(sentence))
print_translation(sentence, translated_text, ground_truth)

plot_attention_weights(sentence, translated_tokens, attention_weights[0])
""",
    ),
    (
        221,
        """
from keras_transformer.tutorial import ExportTranslator
""",
    ),
    (
        224,
        """
translator = ExportTranslator(translator)
""",
    ),
    (
        226,
        """
translator('este é o primeiro livro que eu fiz.').numpy()
""",
    ),
    (
        227,
        """
tf.saved_model.save(translator, export_dir='translator')
""",
    ),
    (
        228,
        """
reloaded = tf.saved_model.load('translator')
""",
    ),
    (
        229,
        """
reloaded('este é o primeiro livro que eu fiz.').numpy()
""",
    ),
]

# -- the stand-ins for the downloads -----------------------------------------------------

# The sentences the tutorial translates, with its ground truths, and a few more.
PAIRS = [
    ("este é um problema que temos que resolver.", "this is a problem we have to solve ."),
    (
        "os meus vizinhos ouviram sobre esta ideia.",
        "and my neighboring homes heard about this idea .",
    ),
    (
        "vou então muito rapidamente partilhar convosco algumas histórias de algumas coisas "
        "mágicas que aconteceram.",
        "so i'll just share with you some stories very quickly of some magical things that "
        "have happened.",
    ),
    ("este é o primeiro livro que eu fiz.", "this is the first book i've ever done."),
    ("Eu li sobre triceratops na enciclopédia.", "I read about triceratops in the encyclopedia."),
    ("obrigado.", "thank you ."),
    ("eu tenho um livro.", "i have a book ."),
    ("a ideia é muito simples.", "the idea is very simple ."),
]


def stand_in_examples():
    """`tfds.load(...)`'s `examples`: train and validation splits of (pt, en) string pairs."""
    pt, en = (list(side) for side in zip(*PAIRS, strict=True))
    return {
        "train": tf.data.Dataset.from_tensor_slices((pt * 4, en * 4)),
        "validation": tf.data.Dataset.from_tensor_slices((pt, en)),
    }


def words(text):
    """The words and punctuation marks of `text` as WordPiece sees them (lowercased)."""
    return re.findall(r"\w+|[^\w\s]", text.lower())


class StandInTokenizer(tf.Module):
    """One side of the tutorial's downloaded converter (`tokenizers.pt`, `tokenizers.en`).

    The library's WordPiece tokenizer over a vocabulary of whole words, behind
    the converter's methods: `tokenize`, `detokenize` and `lookup` of dense or
    ragged ids, and `get_vocab_size` as a tensor.
    """

    def __init__(self, texts):
        super().__init__()
        vocab = sorted({word for text in texts for word in words(text)})
        self.tokenizer = Tokenizer(RESERVED_TOKENS + vocab)
        # Traced now, so that the SavedModel holds every signature the tutorial calls.
        self.tokenize.get_concrete_function(tf.TensorSpec([None], tf.string))
        for ids in (
            tf.TensorSpec([None, None], tf.int64),
            tf.RaggedTensorSpec([None, None], tf.int64),
        ):
            self.detokenize.get_concrete_function(ids)
            self.lookup.get_concrete_function(ids)
        self.get_vocab_size.get_concrete_function()

    @tf.function
    def tokenize(self, strings):
        return self.tokenizer.tokenize(strings)

    @tf.function
    def detokenize(self, token_ids):
        if isinstance(token_ids, tf.Tensor):
            token_ids = tf.RaggedTensor.from_tensor(token_ids, padding=0)
        return self.tokenizer.detokenize(token_ids)

    @tf.function
    def lookup(self, token_ids):
        return tf.gather(self.tokenizer.vocab, token_ids)

    @tf.function
    def get_vocab_size(self):
        return tf.shape(self.tokenizer.vocab)[0]


def save_stand_in_tokenizers(path):
    """What the tutorial downloads and unzips at `path`: a SavedModel with `.pt` and `.en`."""
    tokenizers = tf.Module()
    tokenizers.pt = StandInTokenizer(pt for pt, _ in PAIRS)
    tokenizers.en = StandInTokenizer(en for _, en in PAIRS)
    tf.saved_model.save(tokenizers, path)


# -- the replay ---------------------------------------------------------------------------


@contextlib.contextmanager
def working_directory(path):
    """The notebook's relative paths (the tokenizers, the export) land in `path`."""
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def run_cell(source, namespace, number):
    """Runs one cell and returns the value of its last expression (the cell's `Out`)."""
    name = f"<tutorial cell {number}>"
    tree = ast.parse(source, name)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), name, "eval"), namespace)


class Replay:
    """The cells run once each, in order, on demand: `run_through(n)` runs every cell up
    to cell n that has not run yet, so each test sees the state the notebook has there."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.namespace = {
            "__name__": "tutorial_notebook",
            "stand_in_examples": stand_in_examples,
            "save_stand_in_tokenizers": save_stand_in_tokenizers,
        }
        self.outputs = {}
        self._next = 0
        self._failed = None

    def run_through(self, number):
        if self._failed is not None:
            pytest.fail(f"tutorial cell {self._failed} failed in an earlier test")
        while self._next < len(CELLS) and CELLS[self._next][0] <= number:
            cell, source = CELLS[self._next]
            self._next += 1
            self._failed = cell
            with working_directory(self.workdir), warnings.catch_warnings():
                # plt.show() under Agg, where a notebook would display the figure.
                warnings.filterwarnings("ignore", message=".*non-interactive")
                self.outputs[cell] = run_cell(source, self.namespace, cell)
            # As Jupyter's inline backend does after every cell.
            plt.close("all")
            self._failed = None
        return self.namespace


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    keras.utils.set_random_seed(0)
    return Replay(tmp_path_factory.mktemp("tutorial"))


# -- what the cells state ------------------------------------------------------------------


def padded(ids, extra=3):
    """`ids` with `extra` more padding positions."""
    return tf.pad(ids, [[0, 0], [0, extra]])


def assert_same_at_real_positions(longer, reference, ids, atol=1e-5):
    """`longer` (from padded inputs) equals `reference` where `ids` are real tokens."""
    real = np.asarray(ids) != 0
    longer = np.asarray(longer)[:, : real.shape[1]]
    np.testing.assert_allclose(longer[real], np.asarray(reference)[real], atol=atol, rtol=0)


def test_data_pipeline_and_tokenizers(notebook):
    ns = notebook.run_through(36)
    assert {"tokenize", "detokenize", "lookup", "get_vocab_size"} <= set(notebook.outputs[29])
    # Detokenizing gives the text back (WordPiece: lowercased, punctuation set off).
    for line, en in zip(ns["round_trip"].numpy(), ns["en_examples"].numpy(), strict=True):
        assert line.decode() == " ".join(words(en.decode()))
    tokens = notebook.outputs[36].to_list()
    assert all(row[0] == b"[START]" and row[-1] == b"[END]" for row in tokens)

    ns = notebook.run_through(55)
    pt, en, en_labels = ns["pt"], ns["en"], ns["en_labels"]
    assert pt.shape[0] == en.shape[0] == en_labels.shape[0] == len(PAIRS) * 4
    assert en.shape == en_labels.shape
    # The labels are the inputs shifted by one: [START] dropped, [END] kept.
    assert np.all(en[:, 0] == START_ID)
    inputs_after_start = en[:, 1:]
    real = inputs_after_start != 0
    assert np.array_equal(inputs_after_start[real], en_labels[:, :-1][real])
    assert np.sum(en_labels == END_ID) == en.shape[0]
    # Rows of different lengths: the masking checks below see padding.
    assert np.any(pt == 0) and np.any(en == 0)


def test_positional_encoding(notebook):
    ns = notebook.run_through(67)
    assert ns["pos_encoding"].shape == (2048, 512)
    dots = ns["dots"].numpy()
    # Normalized, each position is most similar to itself, then to its neighbours.
    assert dots[1000] == pytest.approx(1.0, abs=1e-5)
    assert np.argmax(dots) == 1000
    assert dots[995:1006].mean() > dots[:100].mean()


def test_embedding_carries_the_padding_mask(notebook):
    ns = notebook.run_through(72)
    assert ns["pt_emb"].shape == ns["pt"].shape + (512,)
    np.testing.assert_array_equal(notebook.outputs[72], ns["en"] != 0)


def test_attention_layers_without_masks_ignore_padding(notebook):
    ns = notebook.run_through(120)
    pt, en, pt_emb, en_emb = ns["pt"], ns["en"], ns["pt_emb"], ns["en_emb"]
    embed_pt, embed_en = ns["embed_pt"], ns["embed_en"]

    # Cross-attention: the output has the query's shape; padded context is never attended.
    sample_ca = ns["sample_ca"]
    reference = sample_ca(en_emb, pt_emb)
    assert reference.shape == en_emb.shape
    scores = sample_ca.last_attn_scores
    assert scores.shape == (en.shape[0], 2, en.shape[1], pt.shape[1])
    assert np.all(scores.numpy().transpose(0, 3, 1, 2)[pt.numpy() == 0] == 0)
    assert_same_at_real_positions(sample_ca(en_emb, embed_pt(padded(pt))), reference, en)
    assert_same_at_real_positions(sample_ca(embed_en(padded(en)), pt_emb), reference, en)

    sample_gsa = ns["sample_gsa"]
    reference = sample_gsa(pt_emb)
    assert reference.shape == pt_emb.shape
    assert_same_at_real_positions(sample_gsa(embed_pt(padded(pt))), reference, pt)
    # Without its Keras mask (tf.identity drops it) the padding is attended to:
    # the invariance above is the mask's doing.
    unmasked = sample_gsa(tf.identity(embed_pt(padded(pt))))[:, : pt.shape[1]].numpy()
    assert not np.allclose(unmasked[pt.numpy() != 0], reference.numpy()[pt.numpy() != 0])

    sample_csa = ns["sample_csa"]
    assert sample_csa(en_emb).shape == en_emb.shape
    assert_same_at_real_positions(sample_csa(embed_en(padded(en))), sample_csa(en_emb), en)
    # Cell 120: early outputs do not depend on later elements.
    assert notebook.outputs[120] < 1e-5


def test_feed_forward_and_encoder(notebook):
    ns = notebook.run_through(142)
    pt, pt_emb, embed_pt = ns["pt"], ns["pt_emb"], ns["embed_pt"]
    assert ns["sample_ffn"](ns["en_emb"]).shape == ns["en_emb"].shape
    layer = ns["sample_encoder_layer"]
    assert_same_at_real_positions(layer(embed_pt(padded(pt))), layer(pt_emb), pt)
    encoder, output = ns["sample_encoder"], ns["sample_encoder_output"]
    assert output.shape == pt.shape + (512,)
    assert_same_at_real_positions(encoder(padded(pt), training=False), output, pt)


def test_decoder_layer_and_decoder(notebook):
    ns = notebook.run_through(156)
    pt, en, en_emb = ns["pt"], ns["en"], ns["en_emb"]
    embed_pt, embed_en = ns["embed_pt"], ns["embed_en"]
    layer = ns["sample_decoder_layer"]
    reference = ns["sample_decoder_layer_output"]
    assert reference.shape == en_emb.shape
    longer = layer(x=embed_en(padded(en)), context=embed_pt(padded(pt, 5)))
    assert_same_at_real_positions(longer, reference, en)

    decoder, output = ns["sample_decoder"], ns["output"]
    assert output.shape == en.shape + (512,)
    assert notebook.outputs[156] == (en.shape[0], 8, en.shape[1], pt.shape[1])
    assert np.all(decoder.last_attn_scores.numpy().transpose(0, 3, 1, 2)[pt.numpy() == 0] == 0)
    longer = decoder(x=padded(en), context=embed_pt(padded(pt, 5)))
    assert_same_at_real_positions(longer, output, en)


def test_transformer(notebook):
    ns = notebook.run_through(175)
    pt, en, transformer = ns["pt"], ns["en"], ns["transformer"]
    vocab_size = int(ns["tokenizers"].en.get_vocab_size())
    assert transformer.decoder.vocab_size == vocab_size
    assert ns["output"].shape == en.shape + (vocab_size,)
    assert ns["attn_scores"].shape == (en.shape[0], 8, en.shape[1], pt.shape[1])
    # Causal: changing a target token changes no logits before it.
    changed = en.numpy().copy()
    changed[:, 2] = changed[:, 2] % (vocab_size - 1) + 1
    logits = transformer((pt, changed), training=False)
    np.testing.assert_allclose(logits[:, :2], ns["output"][:, :2], atol=1e-5)
    assert not np.allclose(logits[:, 2:], ns["output"][:, 2:], atol=1e-5)


def test_training(notebook):
    ns = notebook.run_through(190)
    history = ns["transformer"].history.history
    assert len(history["loss"]) == 20
    assert np.all(np.isfinite(history["loss"])) and np.all(np.isfinite(history["val_loss"]))
    assert "masked_accuracy" in history


def greedy_by_rerunning(transformer, context_ids, max_length):
    """The tutorial's decoding loop: the whole model re-run for every new token. Returns
    the tokens and, per step, the last decoder layer's cross-attention of that step's
    newest query."""
    output = tf.constant([[START_ID]], tf.int64)
    attention_rows = []
    for _ in range(max_length):
        logits = transformer((context_ids, output), training=False)
        attention_rows.append(transformer.decoder.last_attn_scores[:, :, -1:, :])
        next_id = tf.argmax(logits[:, -1:, :], axis=-1)
        output = tf.concat([output, next_id], axis=1)
        if int(next_id[0, 0]) == END_ID:
            break
    return output, tf.concat(attention_rows, axis=2)


def test_translator(notebook):
    ns = notebook.run_through(218)
    # Cells 209-213: one attention row per generated token (the tutorial labels
    # them translated_tokens[1:]), one column per source token.
    in_tokens, tokens = notebook.outputs[211], notebook.outputs[213]
    assert tokens[0] == b"[START]" and in_tokens[0] == b"[START]"
    assert notebook.outputs[209] == (len(tokens) - 1, len(in_tokens))

    sentence, tokens, attention = ns["sentence"], ns["translated_tokens"], ns["attention_weights"]
    translator, transformer, tokenizers = ns["translator"], ns["transformer"], ns["tokenizers"]
    assert ns["translated_text"].shape == ()
    source_length = tokenizers.pt.tokenize(tf.constant([sentence])).row_lengths()[0]
    assert attention.shape == (1, 8, len(tokens) - 1, source_length)

    # The tutorial's loop finds the same tokens, and each of its steps attended as the
    # translator's one teacher-forced pass says (causality: a later token changes no
    # earlier query's attention).
    context_ids = tokenizers.pt.tokenize(tf.constant([sentence])).to_tensor()
    expected, step_attention = greedy_by_rerunning(transformer, context_ids, max_length=8)
    text, tokens, attention = translator(tf.constant(sentence), max_length=8)
    np.testing.assert_array_equal(tokens, tokenizers.en.lookup(expected)[0])
    assert text.numpy() == tokenizers.en.detokenize(expected)[0].numpy()
    assert step_attention.shape == attention.shape
    np.testing.assert_allclose(attention, step_attention, atol=1e-5)


# A fresh interpreter with tensorflow and tensorflow_text only: `import keras_transformer`
# raises ImportError there, so loading must not need the library.
FRESH_PROCESS = r"""
import sys
sys.modules["keras_transformer"] = None
import tensorflow as tf
import tensorflow_text  # noqa: F401
reloaded = tf.saved_model.load(sys.argv[1])
print(reloaded(sys.argv[2]).numpy().decode("utf-8"))
"""


def test_export(notebook):
    ns = notebook.run_through(229)
    sentence = "este é o primeiro livro que eu fiz."
    in_memory = notebook.outputs[226]
    assert notebook.outputs[229] == in_memory
    text, _, _ = ns["translator"].translator(tf.constant(sentence))
    assert text.numpy() == in_memory
    run = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(notebook.workdir / "translator"), sentence],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == in_memory.decode("utf-8")
