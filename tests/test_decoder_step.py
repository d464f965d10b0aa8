"""The decoder's one-token step (the layers' `step` methods, `layers/step_ops.py`)
against the Keras layers' full calls it stands for."""

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import profile_decode
from keras_transformer.constants import PAD_ID
from keras_transformer.inference import beam, sampling, sub_batches
from keras_transformer.inference.search import MATMUL_ATTENTION_ROWS
from keras_transformer.layers import step_ops
from tests.helpers import tiny_transformer

VOCAB = 30
VARIANTS = {
    "post-LN, own projection": {},
    "pre-LN, own projection": {"normalize_first": True},
    "pre-LN, tied": {"normalize_first": True, "tie_embeddings": True},
    "shared and tied, gelu": {
        "share_embeddings": True,
        "tie_embeddings": True,
        "activation": "gelu",
    },
    # What an imported Marian checkpoint uses (keras_transformer.pretrained).
    "Marian's options": {
        "share_embeddings": True,
        "tie_embeddings": True,
        "logits_bias": True,
        "activation": "silu",
        "embedding_scale": 1.0,
        "position_layout": "halves",
        "decoder_layers": 3,
        "source_start": False,
    },
}
SOURCE = np.array([[2, 5, 6, 7, 8, 3], [2, 9, 3, 0, 0, 0], [2, 11, 12, 3, 0, 0]])
TARGET = np.array([[2, 4, 9, 13, 5, 7], [2, 6, 6, 21, 8, 3], [2, 17, 3, 0, 0, 0]])


def model_of(variant, **overrides):
    """The variant's tiny model with every layer norm's gamma and beta and every bias
    drawn at random: built fresh they are 1 and 0, under which a step that dropped or
    misplaced a norm's weights or a bias would still match the layers."""
    model = tiny_transformer(
        vocab_size=VOCAB, num_layers=2, seed=3, **VARIANTS[variant], **overrides
    )
    rng = np.random.default_rng(7)
    for weight in model.weights:
        name = weight.path.rsplit("/", 1)[-1]
        if name in ("gamma", "beta", "bias", "logits_bias"):
            center = 1.0 if name == "gamma" else 0.0
            weight.assign(center + rng.normal(0.0, 0.3, weight.shape))
    # A trained model never predicts [PAD] (the loss masks it out); random weights
    # may, and a search that feeds [PAD] back is no longer the full model, which
    # masks it.
    for bias in (model.output_bias, model.final_layer and model.final_layer.bias):
        if bias is not None:
            values = bias.numpy()
            values[PAD_ID] = -10.0
            bias.assign(values)
    return model


@pytest.mark.parametrize("matmul_attention", [False, True], ids=["broadcast", "matmul"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_step_logits_equal_the_full_model(variant, matmul_attention):
    """Teacher-forced, position by position: the step's logits are the model's logits
    at that position, the cache one position longer after each step; with either
    form of the attention."""
    model = model_of(variant)
    full = model((SOURCE, TARGET), training=False).numpy()
    state = model.decoding_start(tf.constant(SOURCE), steps=TARGET.shape[1])
    for t in range(TARGET.shape[1]):
        logits, state = model.decoding_step(tf.constant(TARGET), t, state, matmul_attention)
        real = TARGET[:, t] != 0  # the full model masks the padded target positions
        np.testing.assert_allclose(
            logits.numpy()[real], full[real, t], atol=1e-5, err_msg=f"step {t}"
        )
        key_cache, value_cache = state.decoder.caches[0]  # values kept transposed
        assert key_cache.shape[2] == value_cache.shape[3] == t + 1


@pytest.mark.parametrize("fixed", [False, True], ids=["growing", "fixed slots"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_decoder_step_equals_the_full_decoder(variant, fixed):
    """The decoder layer's own step, position by position, gives the features of the
    decoder's full call, with caches that grow or of fixed slots."""
    model = model_of(variant)
    context, context_mask = model.encode(tf.constant(SOURCE))
    full = model.decoder(TARGET, context, context_mask=context_mask).numpy()
    weights = model.decoder.step_weights()
    state = model.decoder.step_start(
        context, context_mask, slots=TARGET.shape[1] if fixed else None
    )
    for t in range(TARGET.shape[1]):
        features, state = model.decoder.step(tf.constant(TARGET[:, t]), t, weights, state)
        real = TARGET[:, t] != 0
        np.testing.assert_allclose(features.numpy()[real], full[real, t], atol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_searches_equal_uncached(variant):
    """Token for token through the in-graph loops, greedy and beam."""
    model = model_of(variant)
    source = tf.constant(SOURCE)
    cached = sampling.greedy_search(model, source, 10, stop_at_end=False, return_logits=True)
    uncached = sampling.greedy_search(
        model, source, 10, stop_at_end=False, use_cache=False, return_logits=True
    )
    np.testing.assert_array_equal(cached.tokens.numpy(), uncached.tokens.numpy())
    np.testing.assert_allclose(cached.logits.numpy(), uncached.logits.numpy(), atol=1e-5)
    beamed = beam.beam_search(model, source, beam_width=3, max_length=10)
    beam_uncached = beam.beam_search(model, source, beam_width=3, max_length=10, use_cache=False)
    np.testing.assert_array_equal(beamed.tokens.numpy(), beam_uncached.tokens.numpy())
    np.testing.assert_allclose(beamed.scores.numpy(), beam_uncached.scores.numpy(), atol=1e-5)
    # Caches of every position from the start (the shapes XLA needs): the same again.
    fixed = sampling.greedy_search(
        model, source, 10, stop_at_end=False, return_logits=True, fixed_shapes=True
    )
    np.testing.assert_array_equal(fixed.tokens.numpy(), uncached.tokens.numpy())
    np.testing.assert_allclose(fixed.logits.numpy(), uncached.logits.numpy(), atol=1e-5)
    beam_fixed = beam.beam_search(model, source, 3, max_length=10, fixed_shapes=True)
    np.testing.assert_array_equal(beam_fixed.tokens.numpy(), beam_uncached.tokens.numpy())
    np.testing.assert_allclose(beam_fixed.scores.numpy(), beam_uncached.scores.numpy(), atol=1e-5)


@pytest.mark.half_precision
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_mixed_precision_step_follows_the_model(variant):
    """Under mixed_bfloat16 the step computes in bfloat16 like the layers and returns
    float32 logits close to the model's."""
    model = model_of(variant, dtype="mixed_bfloat16")
    full = model((SOURCE, TARGET), training=False).numpy()
    state = model.decoding_start(tf.constant(SOURCE), steps=TARGET.shape[1])
    # Every product of the step (each layer's and the output projection) in bfloat16.
    weights = state.weights
    kernels = [
        part.kernel
        for layer in weights.decoder.blocks
        for sublayer in layer
        for part in sublayer
        if isinstance(part, step_ops.Projection)
    ]
    projection = weights.projection  # its own, or the tied table transposed
    kernels.append(getattr(projection, "kernel", projection))
    assert len(kernels) > len(weights.decoder.blocks)
    assert {k.dtype for k in kernels} == {tf.bfloat16}
    for t in range(TARGET.shape[1]):
        logits, state = model.decoding_step(tf.constant(TARGET), t, state)
        assert logits.dtype == tf.float32
        real = TARGET[:, t] != 0
        np.testing.assert_allclose(logits.numpy()[real], full[real, t], atol=0.1)


def test_traced_beam_with_a_dynamic_width_equals_uncached():
    """The beam width as a tensor (as the export's signature takes it): the hypothesis
    axis and the caches change size inside the loop."""
    model = model_of("pre-LN, tied")

    @tf.function(
        input_signature=[tf.TensorSpec([None, None], tf.int64), tf.TensorSpec([], tf.int32)]
    )
    def beams(source, width):
        cached = beam.beam_search(model, source, beam_width=width, max_length=10)
        uncached = beam.beam_search(model, source, beam_width=width, max_length=10, use_cache=False)
        return cached.tokens, uncached.tokens, cached.scores, uncached.scores

    for width in (1, 3):
        tokens, reference, scores, reference_scores = beams(tf.constant(SOURCE), tf.constant(width))
        np.testing.assert_array_equal(tokens.numpy(), reference.numpy())
        np.testing.assert_allclose(scores.numpy(), reference_scores.numpy(), atol=1e-5)


def test_searches_choose_the_attention_form_by_rows_with_the_same_results(monkeypatch):
    """From `MATMUL_ATTENTION_ROWS` rows a search (greedy: sources; beam: sources x
    width) attends with matmuls, below with broadcast products, and with
    `matmul_attention=False` with broadcast products throughout; a batch that crosses
    the line decodes each row as the rows decoded apart do."""
    model = model_of("pre-LN, tied")
    forms = []
    attend = step_ops.attend

    def spy(*args, **kwargs):
        forms.append(kwargs.get("matmul", args[5] if len(args) > 5 else False))
        return attend(*args, **kwargs)

    monkeypatch.setattr(step_ops, "attend", spy)
    threshold = MATMUL_ATTENTION_ROWS
    rows = np.resize(SOURCE, (threshold + 1, SOURCE.shape[1]))
    rows[:, 1] = np.arange(len(rows)) % (VOCAB - 4) + 4  # rows that differ

    def used(search):
        forms.clear()
        result = search()
        assert len(set(forms)) == 1, forms
        return forms[0], result

    matmul, greedy = used(lambda: sampling.greedy_search(model, rows[:threshold], 10))
    broadcast, part = used(lambda: sampling.greedy_search(model, rows[: threshold - 1], 10))
    assert matmul and not broadcast
    np.testing.assert_array_equal(greedy.tokens.numpy()[:-1], part.tokens.numpy())
    np.testing.assert_allclose(greedy.scores.numpy()[:-1], part.scores.numpy(), atol=1e-5)

    width = 4
    sources = threshold // width
    matmul, whole = used(lambda: beam.beam_search(model, rows[:sources], width, 10))
    broadcast, part = used(lambda: beam.beam_search(model, rows[: sources - 1], width, 10))
    assert matmul and not broadcast
    np.testing.assert_array_equal(whole.tokens.numpy()[:-1], part.tokens.numpy())
    np.testing.assert_allclose(whole.scores.numpy()[:-1], part.scores.numpy(), atol=1e-5)
    # A loop for XLA (fixed shapes) keeps the broadcast form at any row count.
    broadcast, fixed = used(
        lambda: sampling.greedy_search(model, rows[:threshold], 10, fixed_shapes=True)
    )
    assert not broadcast
    # So does a search told `matmul_attention=False`, with the same results.
    greedy_search = sampling.GreedySearch(max_length=10, matmul_attention=False)
    broadcast, alike = used(lambda: greedy_search(model, rows[:threshold]))
    assert not broadcast
    np.testing.assert_array_equal(alike.tokens.numpy(), greedy.tokens.numpy())
    np.testing.assert_allclose(alike.scores.numpy(), greedy.scores.numpy(), atol=1e-5)
    beam_search = beam.BeamSearch(max_length=10, beam_width=width, matmul_attention=False)
    broadcast, alike = used(lambda: beam_search(model, rows[:sources]))
    assert not broadcast
    np.testing.assert_array_equal(alike.tokens.numpy(), whole.tokens.numpy())
    np.testing.assert_allclose(alike.scores.numpy(), whole.scores.numpy(), atol=1e-5)
    np.testing.assert_array_equal(fixed.tokens.numpy(), greedy.tokens.numpy())


def test_the_step_reads_no_variable_and_moves_no_cache_in_the_loop():
    """Weights are read and fused before the loop; a step appends to the caches
    (ConcatV2), never transposes or scatters them."""
    model = model_of("post-LN, own projection")

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
    def greedy(source):
        return sampling.greedy_search(model, source, 8).tokens

    ops = profile_decode.step_ops(
        greedy.get_concrete_function(tf.TensorSpec([None, None], tf.int64))
    )
    assert ops["ReadVariableOp"] == 0
    assert ops["Transpose"] == 0 and ops["TensorScatterUpdate"] == 0
    # Two self-attention caches (key, value) per layer grow by one position.
    assert ops["ConcatV2"] == 2 * model.num_layers
    assert ops["MatMul"] == 6 * model.num_layers + 1  # + the vocabulary projection


def test_step_ops_finds_the_step_loop_inside_the_sub_batch_loop():
    """As in an export: the search's two step loops sit in a conditional's branches
    inside the sub-batch loop, whose own body (which runs the encoder, reading its
    variables) is not a step."""
    model = model_of("post-LN, own projection")

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)])
    def translate(source):
        search = sampling.GreedySearch(max_length=8)
        return sub_batches.in_sub_batches(model, search, source, sub_batch_size=4).tokens

    ops = profile_decode.step_ops(translate.get_concrete_function())
    assert ops["ReadVariableOp"] == 0
    assert ops["ConcatV2"] == 2 * model.num_layers
    assert ops["MatMul"] == 6 * model.num_layers + 1
