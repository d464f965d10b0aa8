"""Distributed training: strategy selection and the global masked-loss mean.

The main test starts two worker processes on localhost (TF_CONFIG, CPU,
MultiWorkerMirroredStrategy), trains a tiny Transformer a few steps, and checks
that both workers end with identical weights equal to those of a one-process
run on the same global batches. The two halves of every global batch hold very
different numbers of padding tokens, so averaging the loss per replica (the
mean of the replicas' means) gives different weights; the workers also train
with such a per-replica loss to show the test would catch it.

This file is also the worker program: `python test_distribute.py worker ...`.
"""

import json
import os
import sys
import tempfile

import numpy as np
import pytest

from tests.helpers import start_workers, wait_for_workers

GLOBAL_BATCH = 8
STEPS = 3
VOCAB = 23
LENGTH = 9


def make_batches():
    """Global batches whose first half has long sentences and second half short ones."""
    rng = np.random.default_rng(0)
    rows = GLOBAL_BATCH * STEPS
    context = rng.integers(4, VOCAB, size=(rows, LENGTH))
    target = rng.integers(4, VOCAB, size=(rows, LENGTH + 1))
    # Real target lengths: 9 in the first half of each batch, 1-2 in the second.
    half = GLOBAL_BATCH // 2
    lengths = np.where(np.arange(rows) % GLOBAL_BATCH < half, LENGTH, 1 + np.arange(rows) % 2)
    for i, n in enumerate(lengths):
        target[i, n + 1 :] = 0
        context[i, 3 + n // 2 :] = 0
    return (context, target[:, :-1]), target[:, 1:]


def naive_loss(label, pred):
    """The per-replica mean of real tokens: what a plain masked mean does under fit."""
    import tensorflow as tf

    from keras_transformer.training.losses import token_losses

    loss, mask = token_losses(label, pred)
    return tf.math.divide_no_nan(tf.reduce_sum(loss), tf.reduce_sum(mask))


def train(strategy, loss):
    """Trains a tiny model STEPS steps on the global batches; returns (weights, losses)."""
    import keras
    import tensorflow as tf

    from keras_transformer.training.distribute import shard_by_data
    from tests.helpers import tiny_transformer

    (context, target_in), target_out = make_batches()
    dataset = tf.data.Dataset.from_tensor_slices(((context, target_in), target_out))
    dataset = shard_by_data(dataset.batch(GLOBAL_BATCH))
    with strategy.scope():
        # Built eagerly by the factory: Keras' symbolic build from a distributed
        # batch fails on a multi-worker PerReplica value.
        model = tiny_transformer(d_model=16, num_heads=2, dff=32, vocab_size=VOCAB, seed=1)
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    losses = []
    for _ in range(STEPS):
        # One step per epoch, so that each reported loss is one step's loss.
        history = model.fit(dataset.skip(len(losses)).take(1), epochs=1, verbose=0)
        losses.append(float(history.history["loss"][0]))
    return [w.copy() for w in model.get_weights()], losses


def worker_main(out_dir):
    import keras

    from keras_transformer.training.distribute import get_strategy
    from keras_transformer.training.losses import MaskedLoss

    keras.config.disable_traceback_filtering()  # full tracebacks in the test's failure output
    strategy = get_strategy("multi_worker")
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    results = {}
    for name, loss in (("global", MaskedLoss()), ("naive", naive_loss)):
        weights, losses = train(strategy, loss)
        results[name] = losses
        np.savez(os.path.join(out_dir, f"{name}_{index}.npz"), *weights)
    with open(os.path.join(out_dir, f"losses_{index}.json"), "w") as f:
        json.dump(results, f)


def load_weights(path):
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


@pytest.mark.slow
def test_two_workers_match_single_process_global_batch():
    import tensorflow as tf

    from keras_transformer.training.losses import MaskedLoss

    with tempfile.TemporaryDirectory() as out_dir:
        procs = start_workers(2, [os.path.abspath(__file__), "worker", out_dir])
        # The one-process reference runs while the workers start.
        expected_weights, expected_losses = train(tf.distribute.get_strategy(), MaskedLoss())
        naive_single_weights, _ = train(tf.distribute.get_strategy(), naive_loss)
        wait_for_workers(procs, timeout=180)

        worker_weights = [load_weights(os.path.join(out_dir, f"global_{i}.npz")) for i in range(2)]
        for a, b in zip(*worker_weights):
            np.testing.assert_array_equal(a, b)
        for got, want in zip(worker_weights[0], expected_weights):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        for index in range(2):
            with open(os.path.join(out_dir, f"losses_{index}.json")) as f:
                losses = json.load(f)
            np.testing.assert_allclose(losses["global"], expected_losses, rtol=1e-4)

        # Sanity of the test itself: in one process the per-batch mean is the
        # global mean, but across two replicas the per-replica mean is not, and
        # the weights then differ clearly from the one-process run.
        for a, b in zip(naive_single_weights, expected_weights):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        naive = load_weights(os.path.join(out_dir, "naive_0.npz"))
        gap = max(float(np.max(np.abs(a - b))) for a, b in zip(naive, expected_weights))
        assert gap > 1e-3, f"per-replica averaging left the weights unchanged (gap {gap})"


def test_get_strategy_names():
    import tensorflow as tf

    from keras_transformer.training.distribute import get_strategy

    assert get_strategy("default") is tf.distribute.get_strategy()
    mirrored = get_strategy("mirrored")
    assert isinstance(mirrored, tf.distribute.MirroredStrategy)
    assert mirrored.num_replicas_in_sync >= 1
    with pytest.raises(ValueError, match="nccl"):
        get_strategy("nccl")


def test_global_token_mean_without_strategy_is_local_mean():
    import tensorflow as tf

    from keras_transformer.training.losses import masked_loss

    label = tf.constant([[5, 6, 0, 0], [7, 0, 0, 0]])
    logits = tf.random.stateless_normal((2, 4, 9), seed=(1, 2))
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(label, logits).numpy()
    want = (per_token[0, 0] + per_token[0, 1] + per_token[1, 0]) / 3
    np.testing.assert_allclose(float(masked_loss(label, logits)), want, rtol=1e-6)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    worker_main(sys.argv[2])
