"""Argument checks that fail at construction time with the offending value."""

import operator

import keras

from keras_transformer.layers import packing


def positive_int(name, value, least=1):
    """`value` as a Python int, if it is an integer >= `least` (1: positive) of any
    integer type.

    Sizes often come from tensors (the tutorial's
    `tokenizers.pt.get_vocab_size().numpy()` is a numpy int32), so numpy
    integers and 0-d integer arrays and eager tensors are accepted; they are
    stored as Python ints so that configs stay JSON. Floats, booleans and
    values <= 0 are refused.
    """
    try:
        integer = None if isinstance(value, bool) else operator.index(value)
    except (TypeError, AttributeError):  # floats, strings, None; tensors of other dtypes
        integer = None
    if integer is None or integer < least:
        kind = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise ValueError(f"`{name}` must be {kind}. Received: {name}={value!r}")
    return integer


def non_negative_int(name, value):
    """`value` as a Python int, if it is an integer >= 0 (`positive_int`'s rules)."""
    return positive_int(name, value, least=0)


def check_rate(name, value):
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")


def check_heads(d_model, num_heads):
    """`(d_model, num_heads)` as Python ints; `num_heads` must divide `d_model`."""
    d_model = positive_int("d_model", d_model)
    num_heads = positive_int("num_heads", num_heads)
    if d_model % num_heads:
        raise ValueError(
            "`d_model` must be divisible by `num_heads` (head size is "
            f"d_model // num_heads). Received: d_model={d_model}, num_heads={num_heads}"
        )
    return d_model, num_heads


def check_token_ids(name, token_ids):
    """Token ids must be an integer tensor of rank 2 `(batch, length)`."""
    if packing.rank(token_ids) not in (None, 2):
        raise ValueError(
            f"`{name}` must have shape (batch, length). Received shape {token_ids.shape}"
        )
    dtype = keras.backend.standardize_dtype(token_ids.dtype)
    if "int" not in dtype:
        raise ValueError(f"`{name}` must hold integer token ids. Received dtype {dtype}")


def check_features(name, x, d_model=None):
    """Feature tensors must have shape `(batch, length, d_model)`."""
    if packing.rank(x) not in (None, 3):
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


def check_attention_sizes(d_model, num_heads, key_dim):
    """`(d_model, num_heads, key_dim, head_size)` of an attention layer, as Python ints or None.

    Two forms: the paper's, `d_model` (heads of `d_model // num_heads`, input
    and output `d_model` wide), and `keras.layers.MultiHeadAttention`'s, the
    tutorial's, `key_dim` (the head size; the width follows the input). Both
    may be given when they agree.
    """
    if d_model is None and key_dim is None:
        raise ValueError(
            "Give `d_model` (the paper's form: heads of d_model // num_heads) or `key_dim` "
            "(keras.layers.MultiHeadAttention's form: the head size). "
            "Received: d_model=None, key_dim=None"
        )
    if key_dim is None:
        d_model, num_heads = check_heads(d_model, num_heads)
        return d_model, num_heads, None, d_model // num_heads
    num_heads = positive_int("num_heads", num_heads)
    key_dim = positive_int("key_dim", key_dim)
    if d_model is not None:
        d_model = positive_int("d_model", d_model)
        if d_model != key_dim * num_heads:
            raise ValueError(
                "`d_model` and `key_dim` disagree: with both, `key_dim` is the head size "
                "d_model // num_heads (or give only `key_dim`, and the width follows the "
                f"input). Received: d_model={d_model}, key_dim={key_dim}, num_heads={num_heads}"
            )
    return d_model, num_heads, key_dim, key_dim


def check_rate_alias(name, value, alias, alias_value, default):
    """A rate given under its own name or under `alias` (another library's name), not both."""
    if value is not None and alias_value is not None:
        raise ValueError(
            f"`{alias}` is another name for `{name}`: give one of them. "
            f"Received: {name}={value!r}, {alias}={alias_value!r}"
        )
    if alias_value is not None:
        check_rate(alias, alias_value)
        return alias_value
    rate = default if value is None else value
    check_rate(name, rate)
    return rate
