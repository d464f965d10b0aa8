"""The decoder's one-token step on weights read once: the serving loop's hot path.

A decoding step runs the whole decoder for one new position per row. Through the
Keras layers that costs about a thousand graph nodes a step: every Dense on a
`(batch, 1, d_model)` input reshapes through `tensordot` (Shape, Prod, GatherV2,
ConcatV2, Reshape), every variable is read again, heads are split by transposes.
On a CPU, where a step's arithmetic is small, those nodes are the cost. Here the
same math runs on `(rows, d_model)` matrices with weights prepared once per search,
outside the step loop (or, for an export, once and for all: `fused_weights`): query,
key and value projections fused into one matrix with the
query's 1/sqrt(head size) folded in, key and value of cross-attention projected once
per source, the source mask turned into an additive bias once. A step is then about
sixty nodes per layer, and its self-attention reads a cache that grows by one
position a step (the positions decoded so far, never `max_length` slots), or,
for a loop that XLA compiles (which needs fixed shapes), a cache of every slot
written in place. Attention takes one of two forms (`_attend`), which the
searches choose by their row count.

The Keras layers stay the reference (`Decoder.decode_step`, the training path);
tests/test_decoder_step.py holds this step to them (same logits within float
rounding, same tokens) for post-LN and pre-LN, tied and untied projections.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from keras_transformer.layers import masks
from keras_transformer.layers.layer_norm import layer_norm


def _tensor(variable, dtype):
    return tf.cast(tf.convert_to_tensor(variable), dtype)


def _layer_norm(x, norm, epsilon):
    """Our LayerNormalization over the last axis, `norm` its (gamma, beta), in float32
    at least."""
    gamma, beta = norm
    return tf.cast(layer_norm(tf.cast(x, gamma.dtype), gamma, beta, epsilon), x.dtype)


def _norm_weights(layer):
    """(gamma, beta) of a LayerNormalization, in float32 or wider. Its epsilon is the
    model's `layer_norm_epsilon`, which every layer norm shares."""
    dtype = tf.float32 if layer.gamma.dtype in (tf.float16, tf.bfloat16) else layer.gamma.dtype
    return (_tensor(layer.gamma, dtype), _tensor(layer.beta, dtype))


def _dense(x, kernel, bias):
    return tf.nn.bias_add(tf.matmul(x, kernel), bias)


def fused_weights(model) -> dict:
    """The step's weights that are computed from the decoder's rather than read as they
    are: per layer, self-attention's query, key and value kernels as one
    `(d_model, 3 * d_model)` matrix and their biases as one vector, query kernels and
    biases carrying the 1/sqrt(head size) scale; and, with the output projection tied
    to the embeddings, the table transposed.

    `prepare` computes them once per search; a translator built with
    `freeze_weights=True` (what `export_translator` saves) keeps them as variables, so
    that a call does not: the table's transpose alone is a few milliseconds of a
    one-sentence call.
    """
    dtype = model.compute_dtype

    def value(dense, attribute, factor=None):
        tensor = _tensor(getattr(dense, attribute), dtype)
        return tensor if factor is None else tensor * factor

    layers = []
    for block in model.decoder.dec_layers:
        self_mha = block.causal_self_attention.mha
        cross_mha = block.cross_attention.mha
        scale = 1.0 / math.sqrt(self_mha.key_dim)
        fused = {}
        for attribute in ("kernel", "bias"):
            fused[f"qkv_{attribute}"] = tf.concat(
                [
                    value(self_mha.query_dense, attribute, scale),
                    value(self_mha.key_dense, attribute),
                    value(self_mha.value_dense, attribute),
                ],
                axis=-1,
            )
            fused[f"cross_q_{attribute}"] = value(cross_mha.query_dense, attribute, scale)
        layers.append(fused)
    weights = {"layers": layers}
    if model.final_layer is None:
        # Tied to the embeddings: transposed here, once. The step's matmul by the
        # table itself (`transpose_b`) was 2.5x slower at 32 rows on TensorFlow's
        # Eigen kernels (the default on AVX2 CPUs), and it is a step's largest op.
        weights["projection_kernel"] = tf.transpose(
            _tensor(model.decoder.embedding.embedding.embeddings, dtype)
        )
    return weights


def prepare(model, fused=None) -> dict:
    """The decoder's weights as tensors for `step`, read once per search (for a
    translator: once per sub-batch), outside the step loop.

    Args:
        model: the `Transformer`.
        fused: `fused_weights(model)` computed before (tensors or variables), or
            None to compute them here from the model's variables.
    """
    dtype = model.compute_dtype
    decoder = model.decoder
    if fused is None:
        fused = fused_weights(model)
    else:
        fused = tf.nest.map_structure(tf.convert_to_tensor, fused)
    layers = []
    for block, fused_layer in zip(decoder.dec_layers, fused["layers"], strict=True):
        self_mha = block.causal_self_attention.mha
        cross_mha = block.cross_attention.mha
        ffn = block.ffn
        layers.append(
            {
                **fused_layer,
                "self_out_kernel": _tensor(self_mha.output_dense.kernel, dtype),
                "self_out_bias": _tensor(self_mha.output_dense.bias, dtype),
                "self_norm": _norm_weights(block.causal_self_attention.residual.layernorm),
                "cross_out_kernel": _tensor(cross_mha.output_dense.kernel, dtype),
                "cross_out_bias": _tensor(cross_mha.output_dense.bias, dtype),
                "cross_norm": _norm_weights(block.cross_attention.residual.layernorm),
                "ffn_inner_kernel": _tensor(ffn.inner_dense.kernel, dtype),
                "ffn_inner_bias": _tensor(ffn.inner_dense.bias, dtype),
                "ffn_out_kernel": _tensor(ffn.output_dense.kernel, dtype),
                "ffn_out_bias": _tensor(ffn.output_dense.bias, dtype),
                "ffn_norm": _norm_weights(ffn.residual.layernorm),
            }
        )
    embedding = decoder.embedding
    weights = {
        "layers": layers,
        "embeddings": _tensor(embedding.embedding.embeddings, dtype),
        "positions": tf.constant(embedding._encoding, dtype=dtype),
    }
    if decoder.final_layernorm is not None:
        weights["final_norm"] = _norm_weights(decoder.final_layernorm)
    if model.final_layer is not None:
        weights["projection_kernel"] = _tensor(model.final_layer.kernel, dtype)
        weights["projection_bias"] = _tensor(model.final_layer.bias, dtype)
    else:
        weights["projection_kernel"] = fused["projection_kernel"]
    return weights


def start(model, context, context_mask, slots=None) -> dict:
    """Per-source state: cross-attention keys/values, the source bias, empty caches.

    Keys are `(rows, heads, positions, head_size)`, values transposed to
    `(rows, heads, head_size, positions)` so that both of `_attend`'s sums run
    over the last axis.

    Args:
        context: the encoder output `(rows, source_length, d_model)`.
        context_mask: bool `(rows, source_length)`, True at real source tokens.
        slots: None for self-attention caches that grow a position a step (a
            step attends over what was decoded). An int gives caches of
            `slots` positions from the start, written in place and masked
            beyond the step: the same results with every loop shape fixed, as
            XLA needs, at the cost of attending over all slots.
    """
    rows = tf.shape(context)[0]
    positions = 0 if slots is None else int(slots)
    cross, self_cache = [], []
    for block in model.decoder.dec_layers:
        key, value = block.cross_attention.project_key_value(context)
        cross.append((key, tf.transpose(value, [0, 1, 3, 2])))
        mha = block.causal_self_attention.mha
        keys = tf.zeros([rows, mha.num_heads, positions, mha.key_dim], mha.compute_dtype)
        values = tf.zeros([rows, mha.num_heads, mha.key_dim, positions], mha.compute_dtype)
        self_cache.append((keys, values))
    bias = masks.additive_bias(context_mask)
    state = {
        "self": self_cache,
        "cross": cross,
        "cross_bias": bias[:, None, :],  # (rows, 1, source): the same for every head
    }
    if slots is not None:
        state["slot_positions"] = tf.range(positions)
    return state


def _heads(x, heads: int, head_size: int):
    """`(rows, heads * head_size)` -> `(rows, heads, 1, head_size)`: one reshape."""
    return tf.reshape(x, [-1, heads, 1, head_size])


def _attend(query, key, value, width: int, bias=None, matmul: bool = False):
    """One query per row and head over `key` `(rows, heads, keys, head_size)` and
    `value` `(rows, heads, head_size, keys)`; `bias` `(rows, 1, keys)` or `(keys,)`.

    Two forms of the same math. Broadcast products and sums (the default) suit few
    rows: a batched matmul at one query per row costs more to set up than to run,
    under oneDNN's kernels (on by default on the AVX-512 machine measured) 0.7x the one-row speed.
    Batched matmuls (`matmul=True`) suit many rows: on Eigen's kernels (the default
    on AVX2) they were 10-20% faster at 64 rows, as each broadcast product is a
    `(rows, heads, keys, head_size)` temporary that a matmul never forms
    (benchmarks/RESULTS.md). The searches choose by a search's row count.
    Values are kept transposed so that both forms read the caches as they are.
    """
    if matmul:
        scores = tf.matmul(query, key, transpose_b=True)  # (rows, heads, 1, keys)
        if bias is not None and bias.shape.rank == 3:
            bias = bias[:, :, None, :]
    else:
        scores = tf.reduce_sum(query * key, axis=-1)  # (rows, heads, keys)
    scores = tf.cast(scores, tf.float32)
    if bias is not None:
        scores += bias
    scores = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))
    weights = tf.cast(scores / tf.reduce_sum(scores, axis=-1, keepdims=True), value.dtype)
    if matmul:
        output = tf.matmul(weights, value, transpose_b=True)  # (rows, heads, 1, head_size)
    else:
        output = tf.reduce_sum(weights[:, :, None, :] * value, axis=-1)  # (rows, heads, head_size)
    return tf.reshape(output, [-1, width])


def step(model, weights, token_ids, index, state, matmul_attention: bool = False):
    """Logits `(rows, target_vocab_size)` for the token after `token_ids` at `index`.

    Args:
        weights: from `prepare`.
        token_ids: int `(rows,)`, the newest token of each row.
        index: int scalar, its position.
        state: from `start` or the previous step; returned with each layer's
            self-attention cache one position longer (or, of fixed size,
            written at `index`).
        matmul_attention: attention as batched matmuls rather than broadcast
            products (`_attend`); the same results.
    """
    heads, head_size = model.num_heads, model.d_model // model.num_heads
    width = model.d_model
    pre_ln = bool(model.normalize_first)
    activation = keras.activations.get(model.activation)
    x = tf.gather(weights["embeddings"], token_ids) * tf.cast(
        math.sqrt(width), weights["embeddings"].dtype
    )
    x += tf.gather(weights["positions"], index)

    epsilon = float(model.layer_norm_epsilon)

    def residual(x, output, norm):
        return x + output if pre_ln else _layer_norm(x + output, norm, epsilon)

    def sublayer_input(x, norm):
        return _layer_norm(x, norm, epsilon) if pre_ln else x

    if "slot_positions" in state:  # fixed-size caches: written at `index`, masked after it
        slot_positions = state["slot_positions"]
        write = tf.equal(slot_positions, index)
        self_bias = masks.additive_bias(slot_positions <= index)

        def append(key_cache, value_cache, key, value):
            return (
                tf.where(write[:, None], key, key_cache),
                tf.where(write, value, value_cache),
            )

    else:  # growing caches: one position longer
        self_bias = None

        def append(key_cache, value_cache, key, value):
            return tf.concat([key_cache, key], axis=2), tf.concat([value_cache, value], axis=3)

    caches = []
    for layer, (key_cache, value_cache), (cross_key, cross_value) in zip(
        weights["layers"], state["self"], state["cross"], strict=True
    ):
        h = sublayer_input(x, layer["self_norm"])
        query, key, value = tf.split(_dense(h, layer["qkv_kernel"], layer["qkv_bias"]), 3, axis=1)
        key_cache, value_cache = append(
            key_cache,
            value_cache,
            _heads(key, heads, head_size),
            tf.reshape(value, [-1, heads, head_size, 1]),
        )
        caches.append((key_cache, value_cache))
        attended = _attend(
            _heads(query, heads, head_size),
            key_cache,
            value_cache,
            width,
            self_bias,
            matmul_attention,
        )
        x = residual(
            x,
            _dense(attended, layer["self_out_kernel"], layer["self_out_bias"]),
            layer["self_norm"],
        )

        h = sublayer_input(x, layer["cross_norm"])
        query = _heads(_dense(h, layer["cross_q_kernel"], layer["cross_q_bias"]), heads, head_size)
        attended = _attend(
            query, cross_key, cross_value, width, state["cross_bias"], matmul_attention
        )
        x = residual(
            x,
            _dense(attended, layer["cross_out_kernel"], layer["cross_out_bias"]),
            layer["cross_norm"],
        )

        h = sublayer_input(x, layer["ffn_norm"])
        inner = activation(_dense(h, layer["ffn_inner_kernel"], layer["ffn_inner_bias"]))
        x = residual(
            x, _dense(inner, layer["ffn_out_kernel"], layer["ffn_out_bias"]), layer["ffn_norm"]
        )

    if "final_norm" in weights:
        x = _layer_norm(x, weights["final_norm"], epsilon)
    logits = tf.matmul(x, weights["projection_kernel"])
    if "projection_bias" in weights:
        logits = tf.nn.bias_add(logits, weights["projection_bias"])
    return tf.cast(logits, tf.float32), {**state, "self": caches}
