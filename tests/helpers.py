"""Shared test helpers: the tiny-model factory and the two batteries.

- `tiny_transformer(**overrides)`: the one small Transformer the tests build.
- `run_layer_battery(...)`: what every public layer must pass (the kind of
  KerasHub's `run_layer_test`).
- `assert_same_in_mode(...)`: a layer or model gives the values (and, where
  the mode claims them, the gradients) of its plain path in another execution
  mode: packed tokens, query chunks, hashed dropout, a key/value cache.
- `start_workers(...)` / `wait_for_workers(...)`: worker processes of a
  multi-worker run on this machine (TF_CONFIG over localhost ports, CPU).

tests/README.md shows how a new layer uses them.
"""

import inspect
import json
import os
import socket
import subprocess
import sys
import types
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import Transformer
from keras_transformer.constants import PAD_ID
from keras_transformer.inference import export
from keras_transformer.layers import packing, step_ops


def assert_close(a, b, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=0)


# Two float computations of one search (cached and uncached, a batch and its rows alone,
# sub-batches and one batch, XLA and not) round differently, and differently again on
# other CPUs (AVX2 or AVX-512 kernels, oneDNN on or off): a hypothesis's score, a sum of
# up to ~16 float32 log-probabilities, agrees within SEARCH_SCORE_ATOL between them.
SEARCH_SCORE_ATOL = 1e-4


def prefix_log_probs(model, context_ids, tokens):
    """`(rows, steps)`: the model's log-probability of each prefix of each row of `tokens`
    (through step t, from [START]), by one teacher-forced call."""
    from keras_transformer.constants import START_ID

    tokens = np.asarray(tokens)
    target_in = np.concatenate([np.full((len(tokens), 1), START_ID), tokens[:, :-1]], 1)
    logits = model((np.asarray(context_ids), target_in), training=False)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32)).numpy().astype(np.float64)
    return np.cumsum(np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0], -1)


def assert_same_hypotheses(
    a, b, *, alpha=None, model=None, context_ids=None, max_near_ties=0, atol=SEARCH_SCORE_ATOL
) -> int:
    """Asserts two searches' results (`.tokens`, `.lengths`, `.scores`; one hypothesis
    a row, or `k` a row) are the same hypotheses, but for counted near ties; returns how
    many it excused.

    Equal tokens must come with equal lengths and scores within `atol`. A hypothesis
    that differs is a near tie when rounding can explain it: its scores under the two
    computations are within `atol` (ranked with the beam's length penalty when `alpha`
    is given): the model scores both alike; or, given `model` and `context_ids`, the
    two hypotheses' prefixes score within `atol` of each other at a step where they
    differ (the model's own teacher-forced scores): the search chose between two
    candidates of equal score there, and each computation kept another, so later steps
    differ too. At most `max_near_ties` are excused; any other difference fails.
    """
    from keras_transformer.inference import beam  # the searches' length penalty

    def ranked(result):
        scores = np.asarray(result.scores, np.float64)
        if alpha is None:
            return scores
        return scores / np.asarray(beam.length_penalty(result.lengths, alpha), np.float64)

    tokens_a, tokens_b = np.asarray(a.tokens), np.asarray(b.tokens)
    assert tokens_a.shape == tokens_b.shape, (tokens_a.shape, tokens_b.shape)
    same = (tokens_a == tokens_b).all(axis=-1)
    np.testing.assert_array_equal(np.asarray(a.lengths)[same], np.asarray(b.lengths)[same])
    np.testing.assert_allclose(
        np.asarray(a.scores)[same], np.asarray(b.scores)[same], atol=atol, rtol=0
    )
    differing = np.argwhere(~same)
    tied = np.abs(ranked(a) - ranked(b))[~same] <= atol
    if model is not None and not tied.all():
        rows = differing[:, 0]
        steps = tokens_a.shape[-1]
        flat_a = tokens_a[~same].reshape(-1, steps)
        flat_b = tokens_b[~same].reshape(-1, steps)
        context = np.asarray(context_ids)[rows]
        gap = np.abs(
            prefix_log_probs(model, context, flat_a) - prefix_log_probs(model, context, flat_b)
        )
        shorter = np.minimum(np.asarray(a.lengths)[~same], np.asarray(b.lengths)[~same])
        apart = np.cumsum(flat_a != flat_b, -1) > 0  # from their first difference on
        live = np.arange(steps)[None, :] < shorter[:, None]
        tied |= ((gap <= atol) & apart & live).any(-1)
    assert tied.all(), (
        f"hypotheses differ where no near tie explains it: entries {differing[~tied].tolist()}"
    )
    assert len(differing) <= max_near_ties, (
        f"{len(differing)} near ties (at most {max_near_ties} allowed): {differing.tolist()}"
    )
    return len(differing)


def graph_op_types(graph_def) -> list[str]:
    """The op type of every node of `graph_def`, its function library's included."""
    types = [node.op for node in graph_def.node]
    for function in graph_def.library.function:
        types += [node.op for node in function.node_def]
    return types


def ragged_mask(lengths, length):
    """Right-padded rows of the given real lengths (one row may be full, one nearly empty)."""
    return np.arange(length)[None, :] < np.array(lengths)[:, None]


# The layer tests' sizes: 4 heads of size 4, a feed-forward twice as wide.
D, H, DFF, VOCAB = 16, 4, 32, 40


def features(batch=2, length=5, seed=0):
    """Random `(batch, length, D)` float32 features."""
    return np.random.default_rng(seed).normal(size=(batch, length, D)).astype("float32")


def real_mask(batch=2, length=5, pad_tail=2):
    """A padding mask whose first row ends in `pad_tail` padded positions."""
    mask = np.ones((batch, length), bool)
    mask[0, length - pad_tail :] = False
    return mask


def token_ids(batch, length, vocab_size, seed=0, pad_tail=0):
    """Random non-padding ids in [1, vocab_size) with `pad_tail` trailing zeros per row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, size=(batch, length)).astype("int32")
    if pad_tail:
        ids[:, length - pad_tail :] = 0
    return ids


# -- the tiny Transformer ---------------------------------------------------------

# The factory's defaults: one block of 4 heads of size 8 (test_model's parameter
# arithmetic assumes d_model=32), 20-id vocabularies (4 reserved ids + 16), and
# no dropout, so that two runs from the same seed train alike.
TINY_TRANSFORMER = dict(
    num_layers=1,
    d_model=32,
    num_heads=4,
    dff=64,
    input_vocab_size=20,
    target_vocab_size=20,
    dropout_rate=0.0,
)


def tiny_transformer_kwargs(vocab_size=None, **overrides) -> dict:
    """The constructor arguments `tiny_transformer` passes: `TINY_TRANSFORMER` with `overrides`.

    `vocab_size` sets both vocabularies; an explicit `input_vocab_size` or
    `target_vocab_size` in `overrides` wins.
    """
    if vocab_size is not None:
        overrides = {"input_vocab_size": vocab_size, "target_vocab_size": vocab_size, **overrides}
    return {**TINY_TRANSFORMER, **overrides}


def tiny_transformer(*, vocab_size=None, seed=0, build=True, **overrides) -> Transformer:
    """A small Transformer: `TINY_TRANSFORMER` with `overrides`.

    Args:
        vocab_size: int. Sets both `input_vocab_size` and `target_vocab_size`
            (an explicit one of those wins).
        seed: int. `keras.utils.set_random_seed(seed)` before building, so two
            models from the same seed start from the same weights. None leaves
            the random state alone.
        build: bool. Calls the model once on a `(1, 3)` batch of ids, so that
            its weights exist before the test uses them (`get_weights`,
            `save`, a spy on a sublayer before the first training step).
        **overrides: any other `Transformer` argument (`num_layers`,
            `dropout_rate`, `dtype`, ...).
    """
    if seed is not None:
        keras.utils.set_random_seed(seed)
    model = Transformer(**tiny_transformer_kwargs(vocab_size, **overrides))
    if build:
        ones = np.ones((1, 3), np.int32)
        model((ones, ones))
    return model


# -- the layer battery ---------------------------------------------------------------

# Mixed bfloat16 against float32 with the same weights, for outputs of O(1):
# the stacks of tests/test_*.py differed by at most 0.05 over 30 random
# initializations (0.02 typically); bfloat16 keeps 8 bits of mantissa.
BFLOAT16_ATOL = 0.1


def run_layer_battery(
    layer_cls,
    init_kwargs,
    call_args,
    call_kwargs=None,
    *,
    expected_shape,
    expected_num_trainable_weights,
    expected_num_non_trainable_weights=0,
    dropout_rate_key="dropout_rate",
    mixed_precision_output_dtype="bfloat16",
):
    """What every public layer must pass (KerasHub's `run_layer_test` kind).

    1. An eager call gives `expected_shape` and creates the expected numbers
       of weight tensors (a forgotten or duplicated sublayer changes them).
    2. `get_config` round-trips through `from_config`, also after
       `json.dumps` / `json.loads` (what a .keras file stores), and the layer
       deserializes without `custom_objects`.
    3. A symbolic (functional) call, and one training step of that model
       (traced, `training=True`) that changes the weights; the functional
       model then gives the eager output.
    4. The training flag reaches dropout: with the rate at 0.99999,
       `training=True` changes the output, `training=False` never does.
    5. Built with `dtype="mixed_bfloat16"`, every sublayer carries the policy,
       the variables stay float32, the output is in
       `mixed_precision_output_dtype` and close to the float32 output with
       the same weights.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments (dropout rates 0, so that step 3
            and the mixed-precision comparison are deterministic).
        call_args: tuple of numpy inputs for the positional call arguments.
        call_kwargs: dict of numpy keyword call inputs (masks, context).
        expected_shape: output shape of the eager call; a list of shapes for
            a layer that returns several tensors.
        expected_num_trainable_weights: int, weight tensors (a Dense layer
            has 2: kernel and bias).
        expected_num_non_trainable_weights: int. Defaults to 0.
        dropout_rate_key: the constructor argument of the dropout rate, or
            None for layers without dropout.
        mixed_precision_output_dtype: the output dtype under mixed_bfloat16:
            "bfloat16", or "float32" where the layer documents float32; a
            list of dtypes for several outputs.

    Returns:
        The layer, after its training step.
    """
    call_kwargs = call_kwargs or {}
    layer = layer_cls(**init_kwargs)
    eager = _flat(layer(*call_args, **call_kwargs))
    expected_shapes = expected_shape if isinstance(expected_shape, list) else [expected_shape]
    assert [tuple(y.shape) for y in eager] == [tuple(shape) for shape in expected_shapes]
    trainable = [w.path for w in layer.trainable_weights]
    assert len(trainable) == expected_num_trainable_weights, f"trainable weights: {trainable}"
    non_trainable = [w.path for w in layer.non_trainable_weights]
    assert len(non_trainable) == expected_num_non_trainable_weights, (
        f"non-trainable weights: {non_trainable}"
    )

    _check_config(layer_cls, layer)
    _check_symbolic_call_and_training_step(layer, eager, call_args, call_kwargs)
    if dropout_rate_key is not None:
        _check_training_flag_reaches_dropout(
            layer_cls, dict(init_kwargs, **{dropout_rate_key: 0.99999}), call_args, call_kwargs
        )
    out_dtypes = mixed_precision_output_dtype
    if not isinstance(out_dtypes, list):
        out_dtypes = [out_dtypes] * len(eager)
    _check_mixed_precision(layer_cls, init_kwargs, layer, call_args, call_kwargs, out_dtypes)
    return layer


def _flat(outputs):
    """A layer's output(s) as a list of numpy arrays."""
    return [np.asarray(y) for y in tf.nest.flatten(outputs)]


def _check_config(layer_cls, layer):
    config = layer.get_config()
    assert layer_cls.from_config(config).get_config() == config
    # JSON turns tuples into lists and rejects numpy scalars: the config must survive it.
    from_json = json.loads(json.dumps(config))
    assert layer_cls.from_config(from_json).get_config() == config
    serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(layer)))
    restored = keras.saving.deserialize_keras_object(serialized)  # no custom_objects
    assert type(restored) is layer_cls
    assert restored.get_config() == config


def _check_symbolic_call_and_training_step(layer, eager, call_args, call_kwargs):
    inputs = [keras.Input(shape=a.shape[1:], dtype=str(a.dtype)) for a in call_args]
    kw_inputs = {
        k: keras.Input(shape=v.shape[1:], dtype=str(v.dtype)) for k, v in call_kwargs.items()
    }
    outputs = tf.nest.flatten(layer(*inputs, **kw_inputs))
    model = keras.Model(inputs + list(kw_inputs.values()), outputs)
    feed = list(call_args) + list(call_kwargs.values())
    if layer.trainable_weights:
        # Trained on the first output (the layer's features, not attention weights).
        trained = keras.Model(model.inputs, outputs[0])
        trained.compile(optimizer="sgd", loss="mse")
        before = [w.numpy().copy() for w in layer.trainable_weights]
        # One traced training step: `fit`'s step without its data adapter and callbacks.
        trained.train_on_batch(feed, eager[0] + 1.0)
        after = [w.numpy() for w in layer.trainable_weights]
        assert any(not np.allclose(b, a) for b, a in zip(before, after)), (
            "the training step changed no weight"
        )
    for got, want in zip(_flat(model(feed)), _flat(layer(*call_args, **call_kwargs)), strict=True):
        assert_close(got, want, atol=1e-5)


def _check_training_flag_reaches_dropout(layer_cls, init_kwargs, call_args, call_kwargs):
    # At a rate of ~1 nearly everything is dropped: any dropout the flag
    # reaches changes the output, while inference must stay deterministic.
    layer = layer_cls(**init_kwargs)
    inference_1 = _flat(layer(*call_args, training=False, **call_kwargs))
    inference_2 = _flat(layer(*call_args, training=False, **call_kwargs))
    training = _flat(layer(*call_args, training=True, **call_kwargs))
    for a, b in zip(inference_1, inference_2, strict=True):
        assert_close(a, b, atol=0)
    changed = any(not np.allclose(a, b, atol=1e-3) for a, b in zip(inference_1, training))
    assert changed, "training=True left the output unchanged: the flag reaches no dropout"


def _check_mixed_precision(layer_cls, init_kwargs, reference, call_args, call_kwargs, out_dtypes):
    layer = layer_cls(**init_kwargs, dtype="mixed_bfloat16")
    layer(*call_args, **call_kwargs)  # builds it
    layer.set_weights(reference.get_weights())
    outputs = tf.nest.flatten(layer(*call_args, **call_kwargs))
    # A sublayer built without the parent's policy would compute in float32.
    policies = {sublayer.name: sublayer.dtype_policy.name for sublayer in layer._flatten_layers()}
    assert set(policies.values()) == {"mixed_bfloat16"}, f"dtype policies: {policies}"
    assert {keras.backend.standardize_dtype(w.dtype) for w in layer.weights} <= {"float32"}
    assert [keras.backend.standardize_dtype(y.dtype) for y in outputs] == out_dtypes
    expected = _flat(reference(*call_args, **call_kwargs))
    for got, want in zip(outputs, expected, strict=True):
        assert_close(tf.cast(got, tf.float32), want, atol=BFLOAT16_ATOL)


# -- the execution-mode battery ------------------------------------------------------

# The modes, and whether each claims the plain path's gradients too.
MODES = {
    # The real tokens only, as rows (`layers/packing.py`): the training step.
    "packed": True,
    # Long queries attend in chunks on CPU (`layers/query_chunks.py`).
    "chunk_queries": True,
    # Dropout masks from a hash: the same layer outside training.
    "hashed_dropout": False,
    # The one-token decoding step with a key/value cache (`CausalSelfAttention.step`).
    "cached": False,
}


def assert_same_in_mode(
    layer,
    mode,
    inputs,
    call_kwargs=None,
    *,
    atol,
    gradients=False,
    mode_kwargs=None,
    padding_mask=None,
    cache_slots=None,
    input_signature=None,
    graph=False,
):
    """The execution-mode battery: `layer` gives the same values in `mode` as in its plain path.

    Both runs take the same `inputs`; each returns the layer's output(s),
    flattened, in a layout the other can be compared with (the padded
    output's real rows against packed rows, say).

    Modes:
        "packed": the first input packed with `packing.pack` and
            `padding_mask` (also passed as `padding_mask=` where the layer's
            call takes it); for token ids (Encoder, Decoder) the mask is
            `ids != 0` and the call gets `packed=True`. Compared with the
            plain output's real rows.
        "chunk_queries", "hashed_dropout": a copy of `layer` from its config
            with that option True, holding `layer`'s weights.
        "cached": `CausalSelfAttention.step` run position by position over
            its input through a key/value cache that grows a position a step,
            or of `cache_slots` positions written in place, against one call
            on the whole input.

    Args:
        layer: a built or unbuilt layer or model; its plain call is the reference.
        mode: a key of `MODES`.
        inputs: tuple of positional inputs (numpy or tensors).
        call_kwargs: keyword call arguments of both runs.
        atol: absolute tolerance of every comparison.
        gradients: also compare the gradients of a fixed random projection
            of the first output with respect to the floating-point inputs;
            only for modes that claim them (`MODES`).
        mode_kwargs: keyword call arguments of the mode's run only (a packed
            context where the plain run has the padded one).
        padding_mask: "packed" only: the first input's padding mask.
        cache_slots: "cached" only.
        input_signature: run both inside `tf.function` with this signature
            (None dimensions: lengths known only at run time).
        graph: run both inside `tf.function` with static shapes.

    Returns:
        namespace: `plain` and `mode` (lists of numpy results, gradients
        last) and `plain_fn` / `mode_fn`, the functions that computed them
        (`tf.function`s when traced, for inspecting their graphs).
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; known: {sorted(MODES)}")
    if gradients and not MODES[mode]:
        raise ValueError(f"Mode {mode!r} does not claim the plain path's gradients.")
    plain_kwargs = dict(call_kwargs or {})
    # The mode's run: the same arguments, but for those `mode_kwargs` replaces.
    other_kwargs = {**plain_kwargs, **(mode_kwargs or {})}
    if mode == "packed":
        plain, other = _packed_runs(layer, plain_kwargs, other_kwargs, padding_mask)
    elif mode == "cached":
        plain, other = _cached_runs(layer, plain_kwargs, cache_slots)
    else:
        plain, other = _twin_runs(layer, mode, inputs, plain_kwargs, other_kwargs)

    def results(run):
        def outputs_and_gradients(*args):
            watched = [a for a in tf.nest.flatten(args) if a.dtype.is_floating]
            with tf.GradientTape() as tape:
                tape.watch(watched)
                outputs = tf.nest.flatten(run(*args))
                # A fixed random projection of the first output. Not sum(y ** 2):
                # after a layer norm that is nearly constant, its gradient noise.
                first = tf.cast(outputs[0], tf.float32)
                projection = tf.random.stateless_normal(tf.shape(first), seed=[1, 2])
                loss = tf.reduce_sum(first * projection)
            if not gradients:
                return outputs
            # An input the output ignores has zero gradient in both runs, not None.
            zero = tf.UnconnectedGradients.ZERO
            return outputs + tape.gradient(loss, watched, unconnected_gradients=zero)

        if graph or input_signature is not None:
            return tf.function(outputs_and_gradients, input_signature=input_signature)
        return outputs_and_gradients

    tensors = tf.nest.map_structure(tf.convert_to_tensor, tuple(inputs))
    plain_fn, mode_fn = results(plain), results(other)
    plain_results = [np.asarray(r) for r in plain_fn(*tensors)]
    mode_results = [np.asarray(r) for r in mode_fn(*tensors)]
    assert len(plain_results) == len(mode_results)
    for got, want in zip(mode_results, plain_results):
        assert got.shape == want.shape, (got.shape, want.shape)
        assert_close(got, want, atol=atol)
    return types.SimpleNamespace(
        plain=plain_results, mode=mode_results, plain_fn=plain_fn, mode_fn=mode_fn
    )


def _packed_runs(layer, plain_kwargs, other_kwargs, padding_mask):
    takes_mask = "padding_mask" in inspect.signature(layer.call).parameters

    def with_mask(kwargs, mask):
        return dict(kwargs, padding_mask=mask) if takes_mask else kwargs

    def plain(first, *rest):
        mask = _token_mask(first, padding_mask)
        return tf.boolean_mask(layer(first, *rest, **with_mask(plain_kwargs, mask)), mask)

    def packed(first, *rest):
        mask = _token_mask(first, padding_mask)
        if first.dtype.is_integer:  # token ids: the stack packs after its embedding
            return layer(first, *rest, packed=True, **other_kwargs)
        return layer(packing.pack(first, mask), *rest, **with_mask(other_kwargs, mask))

    return plain, packed


def _token_mask(first, padding_mask):
    if first.dtype.is_integer:
        return first != PAD_ID
    if padding_mask is None:
        raise ValueError("Mode 'packed' needs `padding_mask` for feature inputs.")
    return padding_mask


def _cached_runs(layer, plain_kwargs, cache_slots):
    def plain(x):
        return layer(x, **plain_kwargs)

    def cached(x):
        rows, length = x.shape[0], x.shape[1]
        weights = layer.step_weights(layer.fused_step_weights())
        cache = layer.empty_step_cache(rows, cache_slots or 0)
        outputs = []
        for t in range(length):
            slots = None if not cache_slots else step_ops.cache_slots(tf.range(cache_slots), t)
            y, cache = layer.step(tf.convert_to_tensor(x[:, t]), weights, cache, slots)
            outputs.append(y)
        return tf.stack(outputs, axis=1)

    return plain, cached


def _twin_runs(layer, option, inputs, plain_kwargs, other_kwargs):
    if not layer.built:
        layer(*inputs, **plain_kwargs)
    twin = type(layer).from_config({**layer.get_config(), option: True})
    twin(*inputs, **plain_kwargs)  # builds it
    twin.set_weights(layer.get_weights())

    def plain(*args):
        return layer(*args, **plain_kwargs)

    def other(*args):
        return twin(*args, **other_kwargs)

    return plain, other


# -- worker processes of a multi-worker run ------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(count, argv):
    """`count` processes running `python *argv`, each a worker of one cluster (TF_CONFIG)
    on localhost, on the CPU, with the repository importable."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(count)]}
    processes = []
    for index in range(count):
        env = dict(os.environ)
        env.update(
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            CUDA_VISIBLE_DEVICES="",
            TF_CPP_MIN_LOG_LEVEL="2",
            PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""),
        )
        processes.append(
            subprocess.Popen(
                [sys.executable, *argv],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return processes


def wait_for_workers(processes, timeout):
    """Waits for every worker; fails the test (killing them all) on a timeout or an error,
    showing the end of each worker's output: one worker's error is often the others' cause."""
    import pytest

    outputs = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            output, _ = process.communicate()
            outputs.append(f"(killed after {timeout} s) {output[-3000:]}")
            timeout = 10  # the others' output, now that they are killed
            continue
        outputs.append(f"(exit status {process.returncode}) {output[-3000:]}")
        if process.returncode != 0:
            timeout = 30  # a worker's failure stops its peers' collectives soon
    if any(not line.startswith("(exit status 0)") for line in outputs):
        pytest.fail("\n".join(f"worker {i} {line}" for i, line in enumerate(outputs)))


# -- prepared data (tests/test_prepared.py, tests/test_backends.py) ---------------------

# A joint SentencePiece vocabulary small enough for a few hundred pairs.
TOKENIZER = {"tokenizer": "sentencepiece", "shared_vocab": True, "vocab_size": 300}
TINY_MODEL = {"num_layers": 1, "d_model": 32, "num_heads": 2, "dff": 64}


def write_corpus(directory: Path, pairs, name: str = "train") -> tuple[Path, Path]:
    src, tgt = directory / f"{name}.en", directory / f"{name}.pt"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return src, tgt


def caught_export_saves(monkeypatch) -> list:
    """Patches the export's `tf.saved_model.save` (for `monkeypatch`'s scope) to record
    the object it would save, the frozen translator, instead of tracing its signatures
    and writing them; returns the list it records into. For tests of what an export does
    around the save: what a SavedModel holds is test_export.py's."""
    saved = []
    monkeypatch.setattr(export.tf.saved_model, "save", lambda obj, *_, **__: saved.append(obj))
    return saved
