"""The full encoder-decoder: mask invariants, saving, mixed precision, errors."""

import itertools
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import masks
from keras_transformer.training.losses import MaskedLoss
from keras_transformer.training.metrics import masked_accuracy
from keras_transformer.training.schedules import make_optimizer
from tests.helpers import BFLOAT16_ATOL, assert_close, tiny_transformer, token_ids

VOCAB = 48


# Beyond the factory's defaults: 48-id vocabularies, dropout in the training
# steps, and the max_length the error test names. Masks must hold through a
# stack, so the invariance tests use three blocks.
MODEL = dict(vocab_size=VOCAB, dropout_rate=0.1, max_length=64)


def pad(ids, extra):
    return np.concatenate([ids, np.zeros((ids.shape[0], extra), ids.dtype)], axis=1)


VARIANTS = [
    dict(),
    dict(normalize_first=True),
    dict(tie_embeddings=True, share_embeddings=True),
    # An imported Marian checkpoint's options (keras_transformer.pretrained).
    dict(
        tie_embeddings=True,
        share_embeddings=True,
        logits_bias=True,
        embedding_scale=1.0,
        position_layout="halves",
        decoder_layers=2,
        source_start=False,
        activation="silu",
    ),
]


@pytest.mark.parametrize("options", VARIANTS)
def test_padding_never_changes_logits_at_real_positions(options):
    model = tiny_transformer(num_layers=3, **MODEL, **options)
    # Rows of different real lengths, already padded inside the batch.
    context = token_ids(3, 7, VOCAB, seed=1)
    context[1, 4:] = 0
    target = token_ids(3, 6, VOCAB, seed=2)
    target[2, 3:] = 0
    reference = model((context, target)).numpy()

    padded_source = model((pad(context, 5), target)).numpy()
    padded_target = model((context, pad(target, 4))).numpy()
    padded_both = model((pad(context, 9), pad(target, 2))).numpy()
    real = target != 0
    assert_close(padded_source[real], reference[real], atol=1e-5)
    assert_close(padded_target[:, :6][real], reference[real], atol=1e-5)
    assert_close(padded_both[:, :6][real], reference[real], atol=1e-5)


def test_each_row_is_independent_of_the_rest_of_the_batch():
    model = tiny_transformer(num_layers=3, **MODEL)
    context, target = token_ids(2, 6, VOCAB, seed=3), token_ids(2, 5, VOCAB, seed=4)
    context[0, 3:] = 0
    batched = model((context, target)).numpy()
    alone = model((context[:1, :3], target[:1])).numpy()
    assert_close(batched[:1], alone, atol=1e-5)


@pytest.mark.parametrize("options", VARIANTS)
def test_decoder_is_causal(options):
    model = tiny_transformer(num_layers=3, **MODEL, **options)
    context, target = token_ids(2, 6, VOCAB, seed=5), token_ids(2, 8, VOCAB, seed=6)
    reference = model((context, target)).numpy()
    for t in (0, 3, 7):
        changed = target.copy()
        changed[:, t] = (changed[:, t] % (VOCAB - 1)) + 1
        logits = model((context, changed)).numpy()
        assert_close(logits[:, :t], reference[:, :t], atol=1e-5)
        assert not np.allclose(logits[:, t:], reference[:, t:], atol=1e-5)


def test_source_changes_do_reach_the_logits():
    model = tiny_transformer(num_layers=3, **MODEL)
    context, target = token_ids(1, 6, VOCAB, seed=7), token_ids(1, 4, VOCAB, seed=8)
    changed = context.copy()
    changed[0, 2] = (changed[0, 2] % (VOCAB - 1)) + 1
    assert not np.allclose(model((context, target)), model((changed, target)), atol=1e-5)


def compiled(model):
    model.compile(
        optimizer=make_optimizer(model.d_model, warmup_steps=10),
        loss=MaskedLoss(label_smoothing=0.1),
        metrics=[masked_accuracy],
    )
    return model


def fit_data(n=16):
    context, target = token_ids(n, 7, VOCAB, seed=9), token_ids(n, 6, VOCAB, seed=10)
    return (context, target[:, :-1]), target[:, 1:]


@pytest.mark.parametrize("options", VARIANTS)
def test_keras_round_trip_of_a_trained_compiled_model(tmp_path, options):
    model = compiled(tiny_transformer(num_layers=2, **MODEL, **options))
    x, y = fit_data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is kt.Transformer
    assert restored.get_config() == model.get_config()
    assert_close(restored(x), model(x), atol=0)
    # Optimizer state and schedule come back, so training continues where it was.
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations)
    assert restored.optimizer.learning_rate.numpy() == model.optimizer.learning_rate.numpy()


def test_shared_embeddings_are_one_set_of_weights():
    model = tiny_transformer(**MODEL, share_embeddings=True, tie_embeddings=True)
    assert model.encoder.embedding is model.decoder.embedding
    untied = tiny_transformer(**MODEL)
    saved = VOCAB * 32 + (32 * VOCAB + VOCAB)  # one embedding table + the final Dense
    assert untied.count_params() - model.count_params() == saved


def test_fit_lowers_the_loss():
    model = compiled(tiny_transformer(vocab_size=VOCAB))
    x, y = fit_data(32)
    history = model.fit(x, y, epochs=15, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] - 0.3


@pytest.mark.parametrize(
    ("built", "data"), [(True, "arrays"), (False, "dataset"), (False, "generator")]
)
def test_fit_traces_its_training_step_once(built, data):
    # The model, its loss and metrics, and its optimizer are built before `fit` traces
    # the step; Keras on TensorFlow would otherwise create their variables in the
    # first trace and then trace the step again. A generator's `(x, y, None)` has an
    # element spec with an Optional part.
    model = compiled(tiny_transformer(vocab_size=VOCAB, build=built))
    traces = 0
    keras_step = model.train_step

    def counted_step(*args):
        nonlocal traces
        traces += 1
        return keras_step(*args)

    model.train_step = counted_step
    x, y = fit_data(16)
    settings = {"batch_size": 16}
    if data == "dataset":
        x, y, settings = tf.data.Dataset.from_tensor_slices((x, y)).batch(16), None, {}
    elif data == "generator":
        batch = (x, y, None)
        x, y, settings = (batch for _ in itertools.count()), None, {"steps_per_epoch": 1}
    history = model.fit(x, y, epochs=2, verbose=0, **settings)
    assert traces == 1
    assert model.optimizer.iterations.numpy() == 2
    assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.half_precision
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision(policy):
    model = compiled(tiny_transformer(num_layers=2, **MODEL, dtype=policy))
    x, y = fit_data()
    logits = model(x)
    assert logits.dtype == tf.float32
    assert model.encoder.enc_layers[0].self_attention.mha.query_dense.compute_dtype == policy[6:]
    history = model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    # Close to the float32 model with the same weights: the logits themselves (an
    # untrained model's probabilities are all about 1/VOCAB, close whatever the logits).
    reference = tiny_transformer(num_layers=2, **MODEL)
    reference.set_weights(model.get_weights())
    assert_close(model(x), reference(x), atol=BFLOAT16_ATOL)


def test_summary_names_the_parts():
    model = tiny_transformer(**MODEL)
    lines = []
    model.summary(print_fn=lambda line, **kwargs: lines.append(line))
    text = "\n".join(lines)
    assert "encoder" in text and "decoder" in text and "Total params" in text


def test_clear_errors_for_bad_arguments_and_inputs():
    with pytest.raises(ValueError, match="divisible"):
        tiny_transformer(**MODEL, d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="num_layers"):
        tiny_transformer(**MODEL, num_layers=0)
    with pytest.raises(ValueError, match="share_embeddings"):
        tiny_transformer(**MODEL, share_embeddings=True, target_vocab_size=VOCAB + 1)
    model = tiny_transformer(**MODEL)
    with pytest.raises(ValueError, match="context_ids, target_in_ids"):
        model(token_ids(1, 4, VOCAB))
    with pytest.raises(ValueError, match="integer"):
        model((np.zeros((1, 4), "float32"), token_ids(1, 4, VOCAB)))
    with pytest.raises(ValueError, match="max_length=64"):
        model((token_ids(1, 65, VOCAB), token_ids(1, 4, VOCAB)))


def test_sizes_accept_numpy_and_tensor_integers():
    # The tutorial's sizes come from `tokenizers.pt.get_vocab_size().numpy()`.
    model = tiny_transformer(
        num_layers=np.int64(1),
        d_model=np.int32(32),
        num_heads=tf.constant(4),
        dff=np.int64(64),
        input_vocab_size=np.int32(VOCAB),
        target_vocab_size=tf.constant(VOCAB, tf.int64),
        max_length=np.int32(64),
    )
    config = {k: v for k, v in model.get_config().items() if k != "name"}
    reference = tiny_transformer(vocab_size=VOCAB, max_length=64).get_config()
    assert config == {k: v for k, v in reference.items() if k != "name"}
    json.dumps(config)
    with pytest.raises(ValueError, match="input_vocab_size"):
        tiny_transformer(input_vocab_size=float(VOCAB))


def test_encoder_and_decoder_called_without_masks_give_the_models_logits():
    # The tutorial's Transformer.call: `decoder(x, encoder(context))`, no masks passed;
    # the encoder's output carries the source mask through every one of three blocks.
    model = tiny_transformer(num_layers=3, **MODEL)
    context = token_ids(3, 7, VOCAB, seed=1)
    context[1, 4:] = 0
    target = token_ids(3, 6, VOCAB, seed=2)
    target[2, 3:] = 0
    logits = model((context, target))
    for source in (context, pad(context, 5)):
        features = model.decoder(x=target, context=model.encoder(source))
        assert_close(model.project(features), logits, atol=1e-5)
    # Keras would weight the loss by a mask on the logits and fail on the scalar
    # masked loss (model.project explains).
    assert masks.keras_mask(logits) is None


def test_marian_options_compute_as_documented():
    """Each option changes what it says: the source's first id unread, the embedding
    scale, the decoder's depth, the bias on the tied projection."""
    options = dict(MODEL, tie_embeddings=True, share_embeddings=True, num_layers=1)
    options["dropout_rate"] = 0.0
    context, target = token_ids(2, 6, VOCAB, seed=5), token_ids(2, 4, VOCAB, seed=6)
    no_start = tiny_transformer(**options, source_start=False)
    changed = context.copy()
    changed[:, 0] = (changed[:, 0] % (VOCAB - 1)) + 1  # another first id, never padding
    assert_close(no_start((changed, target)), no_start((context, target)), atol=0)
    with_start = tiny_transformer(**options)
    with_start.set_weights(no_start.get_weights())
    assert_close(with_start((context[:, 1:], target)), no_start((context, target)), atol=1e-6)
    uneven = tiny_transformer(**MODEL, num_layers=1, decoder_layers=3)
    assert (len(uneven.encoder.enc_layers), len(uneven.decoder.dec_layers)) == (1, 3)
    biased = tiny_transformer(**options, logits_bias=True)
    before = biased((context, target)).numpy()
    bias = np.arange(VOCAB, dtype="float32")
    biased.output_bias.assign(bias)
    assert_close(biased((context, target)), before + bias, atol=1e-5)
    with pytest.raises(ValueError, match="logits_bias=True"):
        tiny_transformer(**MODEL, logits_bias=True)
