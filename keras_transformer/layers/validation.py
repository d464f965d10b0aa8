"""Argument checks that fail at construction time with the offending value."""

import tensorflow as tf

from keras_transformer.layers import packing


def check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def check_rate(name, value):
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")


def check_heads(d_model, num_heads):
    check_positive("d_model", d_model)
    check_positive("num_heads", num_heads)
    if d_model % num_heads:
        raise ValueError(
            "`d_model` must be divisible by `num_heads` (head size is "
            f"d_model // num_heads). Received: d_model={d_model}, num_heads={num_heads}"
        )


def check_token_ids(name, token_ids):
    """Token ids must be an integer tensor of rank 2 `(batch, length)`."""
    if token_ids.shape.rank is not None and token_ids.shape.rank != 2:
        raise ValueError(
            f"`{name}` must have shape (batch, length). Received shape {token_ids.shape}"
        )
    dtype = tf.as_dtype(token_ids.dtype)
    if not dtype.is_integer:
        raise ValueError(f"`{name}` must hold integer token ids. Received dtype {dtype.name}")


def check_features(name, x, d_model=None):
    """Feature tensors must have shape `(batch, length, d_model)`."""
    if x.shape.rank is not None and x.shape.rank != 3:
        raise ValueError(
            f"`{name}` must have shape (batch, length, d_model). Received shape {x.shape}"
        )
    _check_feature_size(name, x, d_model)


def check_maybe_packed(name, x, d_model, mask, mask_name="padding_mask"):
    """Features `(batch, length, d_model)`, or packed `(tokens, d_model)` with their mask."""
    if not packing.is_packed(x):
        check_features(name, x, d_model)
        return
    if mask is None:
        raise ValueError(
            f"`{name}` is packed (shape (tokens, d_model)): `{mask_name}` is required "
            "to lay its tokens out in the batch."
        )
    _check_feature_size(name, x, d_model)


def _check_feature_size(name, x, d_model):
    if d_model is not None and x.shape[-1] is not None and x.shape[-1] != d_model:
        raise ValueError(f"`{name}` has feature size {x.shape[-1]}, expected d_model={d_model}")
