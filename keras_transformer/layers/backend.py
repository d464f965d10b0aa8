"""What differs between the Keras backends, decided here and nowhere else.

The layers, the model's forward pass, the masks, the loss and the metrics are
written with `keras.ops` and run on the TensorFlow, JAX and PyTorch backends
with the same results. Four speed paths are TensorFlow's alone, each switched
on by a constant below; on the other backends the plain `keras.ops`
computation runs in their place:
- `PACKED_TRAINING`: `Transformer.train_step` runs the per-token layers on the
  real tokens only (`skip_padding`, `packing.py`), which needs the
  data-dependent shapes TensorFlow's graphs have and JAX's `jit` has not
  (figures: benchmarks/RESULTS.md, "Figures behind design choices").
- `WRITTEN_OUT_LAYER_NORM_GRADIENT`: layer norm's closed-form gradient
  (`layer_norm.py`), a handful of ops instead of the twenty that TensorFlow's
  executor runs one by one for the automatic one.
- `QUERY_CHUNKS`: long queries attend in chunks small enough for TensorFlow's
  CPU batched matmul to use every thread (`query_chunks.py`).
- `HASHED_DROPOUT`: dropout masks from an integer hash, several times cheaper
  than TensorFlow's Philox generator under XLA on CPU (`dropout.py`).

Where TensorFlow is not the backend, this module and the layers import
without it.
"""

import contextlib

import keras
import numpy as np
from keras import ops

BACKEND = keras.backend.backend()
ON_TENSORFLOW = BACKEND == "tensorflow"

PACKED_TRAINING = ON_TENSORFLOW
WRITTEN_OUT_LAYER_NORM_GRADIENT = ON_TENSORFLOW
QUERY_CHUNKS = ON_TENSORFLOW
HASHED_DROPOUT = ON_TENSORFLOW

if ON_TENSORFLOW:
    import tensorflow as tf


def is_concrete(x):
    """Whether `x` holds values (an eager call), not a symbol of a trace.

    The attention layers keep their weights for inspection (the tutorial's
    `last_attn_scores`) only from calls whose weights are values.
    """
    if keras.backend.is_keras_tensor(x):
        return False
    if ON_TENSORFLOW:
        return tf.executing_eagerly()
    if BACKEND == "jax":
        import jax

        return not isinstance(x, jax.core.Tracer)
    if BACKEND == "torch":
        return x.device.type != "meta"  # Keras infers shapes on the meta device
    return True


@contextlib.contextmanager
def checked(condition, message):
    """Runs the block if `condition` holds; fails first, naming `message`, where it does not.

    Known conditions (Python booleans) fail at once. On TensorFlow a condition
    on tensors fails in the graph before the block's ops run. A condition on a
    value JAX traces (a start position or cache index passed into `jax.jit`) is
    unknown until run, and is not checked there: positions past the end clamp
    as JAX's slices do. Shapes are static under JAX and PyTorch, so conditions
    on shapes alone are always checked.
    """
    if isinstance(condition, (bool, np.bool_)):
        if not condition:
            raise ValueError(message)
        yield
    elif ON_TENSORFLOW:
        with tf.control_dependencies([tf.debugging.Assert(condition, [message])]):
            yield
    else:
        if is_concrete(condition) and not bool(condition):
            raise ValueError(message)
        yield


def require_tensorflow(what: str) -> None:
    """Raises a one-line error naming `what` where the backend is not TensorFlow: the
    decoder's one-token step and the searches run in TensorFlow graphs (serving)."""
    if not ON_TENSORFLOW:
        raise ValueError(
            f"{what} runs on the TensorFlow backend (KERAS_BACKEND=tensorflow), for "
            f"serving; the Keras backend here is {BACKEND!r}."
        )


def argmax(x):
    """The index of the largest value along the last axis, int32.

    `keras.ops.argmax` on TensorFlow first rewrites negative zeros (four more
    passes over its input, for parity with JAX on flush-to-zero machines); over
    a batch's logits that costs a training step several milliseconds, for an
    answer no prediction needs. TensorFlow's own op skips it.
    """
    if ON_TENSORFLOW:
        return tf.argmax(x, axis=-1, output_type=tf.int32)
    return ops.cast(ops.argmax(x, axis=-1), "int32")
