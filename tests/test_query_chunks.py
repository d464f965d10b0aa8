"""Attention in query chunks (`layers/query_chunks.py`) changes no number.

With `chunk_queries=True`, on TensorFlow's CPU kernels long queries attend in
chunks so that each batched matmul stays small enough to be spread over
threads. Values and gradients must equal those of the unsplit attention,
whether the lengths are known when the graph is traced (a static split) or not
(a branch picked at run time).
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import query_chunks
from tests.helpers import assert_same_in_mode, graph_op_types, ragged_mask, tiny_transformer

# Head size 16 as in the tutorial: products cross 128 * 128 at 33 keys.
D, H = 32, 2
NEEDS_CPU = pytest.mark.skipif(
    bool(tf.config.list_logical_devices("GPU")), reason="query chunks apply on CPU only"
)


@pytest.mark.parametrize(
    "query_length, key_length, head_size, count",
    [
        (32, 32, 16, 1),  # 32 * 32 * 16 = 128 * 128: on the line, not over it
        (33, 33, 16, 2),
        (48, 48, 16, 4),  # 21 rows a chunk: 3 chunks needed, 4 on offer
        (104, 104, 16, 16),
        (128, 128, 16, 16),
        (8, 128, 16, 1),  # a short query over many keys
        (200, 200, 16, 1),  # 16 chunks would still be over: left whole
        (64, 64, 64, 16),
        (128, 128, 64, 1),
    ],
)
def test_chunk_count(query_length, key_length, head_size, count):
    index = query_chunks.chunk_count_index(query_length, key_length, head_size)
    assert query_chunks.CHUNK_COUNTS[int(index)] == count


def test_even_sizes_cover_the_length():
    sizes = query_chunks._even_sizes(tf.constant(50), 4).numpy()
    assert sizes.tolist() == [13, 13, 12, 12]


@NEEDS_CPU
@pytest.mark.parametrize("known_lengths", [True, False], ids=["static", "dynamic"])
def test_chunked_attention_equals_whole(known_lengths):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(3, 50, D)), tf.float32)
    context = tf.constant(rng.normal(size=(3, 45, D)), tf.float32)
    x_mask = tf.constant(ragged_mask([50, 20, 37], 50))
    context_mask = tf.constant(ragged_mask([45, 9, 30], 45))
    features, mask = tf.TensorSpec((None, None, D)), tf.TensorSpec((None, None), tf.bool)
    # Whole queries (chunk_queries=False) against a copy with chunk_queries=True
    # and the same weights: outputs, cross-attention weights and input gradients.
    for layer, inputs, call_kwargs, signature in [
        (
            kt.CausalSelfAttention(d_model=D, num_heads=H, dropout_rate=0.0),
            (x, x_mask),
            {},
            [features, mask],
        ),
        (
            kt.CrossAttention(d_model=D, num_heads=H, dropout_rate=0.0),
            (x, context, context_mask),
            dict(return_attention_scores=True),
            [features, features, mask],
        ),
    ]:
        runs = assert_same_in_mode(
            layer,
            "chunk_queries",
            inputs,
            call_kwargs,
            gradients=True,
            graph=True,
            input_signature=None if known_lengths else signature,
            atol=2e-5,
        )
        # The chunked graph really splits: 4 chunks of 2 batched matmuls each
        # (forward), where the whole attention has 2 forward and 4 backward.
        graph = runs.mode_fn.get_concrete_function(*inputs).graph
        ops = graph_op_types(graph.as_graph_def())
        assert ops.count("BatchMatMulV2") >= 2 * 4
        if not known_lengths:
            assert "Case" in ops or "StatelessCase" in ops


@NEEDS_CPU
def test_no_chunks_under_xla():
    seen = {}

    @tf.function(jit_compile=True)
    def compiled():
        seen["xla"] = query_chunks.worth_splitting()
        return tf.constant(0)

    @tf.function
    def plain():
        seen["graph"] = query_chunks.worth_splitting()
        return tf.constant(0)

    compiled()
    plain()
    assert seen == {"xla": False, "graph": True}


@NEEDS_CPU
def test_decoding_steps_are_not_split():
    """One query a step: the cached decoding graph holds no chunk branches."""
    layer = kt.CausalSelfAttention(d_model=D, num_heads=H, chunk_queries=True)
    layer(tf.zeros((2, 5, D)))  # builds it

    @tf.function(input_signature=[tf.TensorSpec((None, D))])
    def step(x):
        weights = layer.step_weights(layer.fused_step_weights())
        return layer.step(x, weights, layer.empty_step_cache(tf.shape(x)[0]))[0]

    step(tf.zeros((2, D)))
    graph = step.get_concrete_function().graph
    ops = graph_op_types(graph.as_graph_def())
    assert "Case" not in ops and "StatelessCase" not in ops


def test_the_switch_reaches_every_attention_layer():
    def switches(model):
        return {
            layer.chunk_queries
            for layer in model._flatten_layers()
            if isinstance(layer, kt.layers.BaseAttention)
        }

    sizes = dict(num_layers=2, num_heads=H, dff=32, build=False)
    assert switches(tiny_transformer(**sizes)) == {False}
    model = tiny_transformer(chunk_queries=True, **sizes)
    assert switches(model) == {True}
    assert kt.Transformer.from_config(model.get_config()).chunk_queries is True
