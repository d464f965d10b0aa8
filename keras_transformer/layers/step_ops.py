"""The arithmetic of the decoder's one-token step, on TensorFlow: the serving loop's hot path.

A decoding step runs the whole decoder for one new position per row. Through the
layers' Keras calls that costs about a thousand graph nodes a step: every Dense on a
`(batch, 1, d_model)` input reshapes through `tensordot` (Shape, Prod, GatherV2,
ConcatV2, Reshape), every variable is read again, heads are split by transposes.
On a CPU, where a step's arithmetic is small, those nodes are the cost. So each
layer of the decoder also has a `step` method (and `step_weights`, the weights it
reads), which runs the same math on `(rows, d_model)` matrices with weights
prepared once per search, outside the step loop (or, for an export, once and for
all: the fused weights, `fused_step_weights`): query, key and value projections
fused into one matrix with the query's 1/sqrt(head size) folded in, key and value
of cross-attention projected once per source, the source mask turned into an
additive bias once. A step is then about sixty nodes per layer, and its
self-attention reads a cache that grows by one position a step (the positions
decoded so far, never `max_length` slots), or, for a loop that XLA compiles (which
needs fixed shapes), a cache of every slot written in place (`CacheSlots`).
Attention takes one of two forms (`attend`), which the searches choose by their
row count.

This module holds what those methods share: the typed weights (`Projection`,
`Norm`) and the few tensor functions. Decoding for serving runs in TensorFlow
graphs, so these run on the TensorFlow backend only; the layers' Keras calls stay
the reference (tests/test_decoder_step.py holds the step to the full model).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.layers import masks
from keras_transformer.layers.layer_norm import layer_norm


class Projection(NamedTuple):
    """A dense projection's weights as tensors: `kernel` `(in, out)`, `bias` `(out,)`."""

    kernel: tf.Tensor
    bias: tf.Tensor


class Norm(NamedTuple):
    """A layer norm's `gamma` and `beta`, in float32 or wider (its epsilon stays with the
    layer that owns it)."""

    gamma: tf.Tensor
    beta: tf.Tensor


class CacheSlots(NamedTuple):
    """A step's view of fixed-size self-attention caches (`fixed_shapes`): which slot it
    writes, and the bias that masks the slots after it."""

    write: tf.Tensor  # bool (slots,)
    bias: tf.Tensor  # float32 (slots,)


def tensor(variable, dtype):
    """A variable's value as a tensor of `dtype`."""
    return tf.cast(tf.convert_to_tensor(variable), dtype)


def projection(dense, dtype, scale: float | None = None) -> Projection:
    """A Keras `Dense` layer's weights in `dtype`, multiplied by `scale` if given."""
    weights = [tensor(dense.kernel, dtype), tensor(dense.bias, dtype)]
    return Projection(*(w if scale is None else w * scale for w in weights))


def dense(x, weights: Projection):
    return tf.nn.bias_add(tf.matmul(x, weights.kernel), weights.bias)


def norm_weights(layer) -> Norm:
    """A `LayerNormalization`'s weights, in float32 at least, as the layer computes."""
    gamma = layer.gamma
    dtype = tf.float32 if gamma.dtype in (tf.float16, tf.bfloat16) else gamma.dtype
    return Norm(tensor(gamma, dtype), tensor(layer.beta, dtype))


def normalize(x, norm: Norm, epsilon: float):
    """Layer norm over the last axis with `norm`'s weights, in their dtype."""
    return tf.cast(
        layer_norm(tf.cast(x, norm.gamma.dtype), norm.gamma, norm.beta, epsilon), x.dtype
    )


def cache_slots(slot_positions, index) -> CacheSlots:
    """The slot a step at `index` writes in fixed-size caches, and the mask after it."""
    return CacheSlots(tf.equal(slot_positions, index), masks.additive_bias(slot_positions <= index))


def heads(x, num_heads: int, head_size: int):
    """`(rows, heads * head_size)` -> `(rows, heads, 1, head_size)`: one reshape."""
    return tf.reshape(x, [-1, num_heads, 1, head_size])


def attend(query, key, value, width: int, bias=None, matmul: bool = False):
    """One query per row and head over `key` `(rows, heads, keys, head_size)` and
    `value` `(rows, heads, head_size, keys)`; `bias` `(rows, 1, keys)` or `(keys,)`.

    Two forms of the same math. Broadcast products and sums (the default) suit few
    rows: a batched matmul at one query per row costs more to set up than to run.
    Batched matmuls (`matmul=True`) suit many rows, as each broadcast product is a
    `(rows, heads, keys, head_size)` temporary that a matmul never forms
    (benchmarks/RESULTS.md, "Figures behind design choices"). The searches choose by a
    search's row count.
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
