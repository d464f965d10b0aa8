"""Runs the library on one Keras backend (KERAS_BACKEND) and writes what it computed.

Keras fixes its backend at import, so tests/test_backends.py runs this script in
a process per backend and compares the files it writes:

    python tests/backend_probe.py make DIR   # build the probe models, save them and their outputs
    python tests/backend_probe.py load DIR   # load DIR's models, write their outputs beside
    python tests/backend_probe.py make DIR load OTHER   # both, in one process

`outputs_<backend>.npz` holds, for each probe model, the logits of a padded batch
(explicit masks, computed from the ids), the same batch with more padding, the
batch with a later target token changed, an encoder block and the decoder
called the tutorial's way (Keras masks) and with explicit masks, and the masked
loss and accuracy of fixed logits; made models add the tutorial's attention
layer called both ways.
"""

import sys
from pathlib import Path

import keras
import numpy as np

import keras_transformer
from keras_transformer.layers import masks

# Two models: the paper's (post-LN, own projection) and the pre-LN one with one
# embedding shared by source, target and projection; the speed-path options are on
# (TensorFlow's alone; the other backends run the plain path with the same results).
MODELS = {
    "post_ln": dict(),
    "pre_ln_shared": dict(
        normalize_first=True, share_embeddings=True, tie_embeddings=True, activation="gelu"
    ),
}
SIZES = dict(num_layers=2, d_model=16, num_heads=4, dff=32, input_vocab_size=40)
SPEED_OPTIONS = dict(hashed_dropout=True, chunk_queries=True, skip_padding=True)

CONTEXT = np.array([[5, 6, 7, 8, 9], [11, 12, 13, 0, 0]], "int32")
TARGET = np.array([[2, 14, 15, 16], [2, 17, 0, 0]], "int32")
LABELS = np.array([[14, 15, 16, 3], [17, 3, 0, 0]], "int32")


def pad(ids, extra):
    return np.pad(ids, ((0, 0), (0, extra)))


def model_outputs(name, model):
    def logits(context, target):
        return keras.ops.convert_to_numpy(model((context, target), training=False))

    changed = TARGET.copy()
    changed[0, 2] = 33  # position 2 of row 0: positions 0 and 1 must not notice
    ids = keras.ops.convert_to_tensor(CONTEXT)
    embedded = model.encoder.embedding(ids)
    context_mask = masks.padding_mask(ids)
    block = model.encoder.enc_layers[0]
    decoder = model.decoder
    encoded = model.encoder(ids)
    return {
        f"{name}/logits": logits(CONTEXT, TARGET),
        f"{name}/logits_more_padding": logits(pad(CONTEXT, 3), pad(TARGET, 2)),
        f"{name}/logits_later_token_changed": logits(CONTEXT, changed),
        f"{name}/block_keras_mask": keras.ops.convert_to_numpy(block(embedded)),
        f"{name}/block_explicit_mask": keras.ops.convert_to_numpy(
            block(embedded, padding_mask=context_mask)
        ),
        f"{name}/decoder_keras_mask": keras.ops.convert_to_numpy(decoder(TARGET, encoded)),
        f"{name}/decoder_explicit_mask": keras.ops.convert_to_numpy(
            decoder(TARGET, encoded, context_mask=context_mask)
        ),
    }


def tutorial_outputs():
    """The tutorial's names, called its way: its attention sized by `key_dim`, Keras masks."""
    from keras_transformer import tutorial

    keras.utils.set_random_seed(2)
    ids = keras.ops.convert_to_tensor(CONTEXT)
    embedded = tutorial.PositionalEmbedding(vocab_size=40, d_model=16)(ids)
    attention = tutorial.GlobalSelfAttention(num_heads=2, key_dim=8, dropout=0.1)
    return {
        "tutorial/attention_keras_mask": keras.ops.convert_to_numpy(attention(embedded)),
        "tutorial/attention_explicit_mask": keras.ops.convert_to_numpy(
            attention(embedded, padding_mask=masks.padding_mask(ids))
        ),
    }


def loss_and_metric_outputs():
    logits = np.random.default_rng(0).normal(size=(2, 4, 40)).astype("float32")
    return {
        "loss": keras.ops.convert_to_numpy(keras_transformer.masked_loss(LABELS, logits)),
        "loss_smoothed": keras.ops.convert_to_numpy(
            keras_transformer.MaskedLoss(label_smoothing=0.1)(LABELS, logits)
        ),
        "accuracy": keras.ops.convert_to_numpy(keras_transformer.masked_accuracy(LABELS, logits)),
    }


def main(mode, directory):
    directory = Path(directory)
    outputs = loss_and_metric_outputs()
    for name, options in MODELS.items():
        path = directory / f"{name}.keras"
        if mode == "make":
            outputs.update(tutorial_outputs())  # fresh weights: compared on this backend only
            keras.utils.set_random_seed(1)
            model = keras_transformer.Transformer(
                **SIZES, target_vocab_size=40, **options, **SPEED_OPTIONS
            )
            model((CONTEXT, TARGET))
            model.save(path)
        else:
            model = keras.saving.load_model(path)
        outputs.update(model_outputs(name, model))
    np.savez(directory / f"outputs_{keras.backend.backend()}.npz", **outputs)


if __name__ == "__main__":
    for mode, directory in zip(sys.argv[1::2], sys.argv[2::2], strict=True):
        main(mode, directory)
