"""Speed levers change speed, not what is learned.

Each lever (XLA, length bucketing, mixed precision, hashed dropout, skipped
padding, query chunks) trains the same tiny model (`tiny_transformer`, seeded)
on the same copy task from the same initial weights; the loss it reaches must
match the plain float32 run within a tolerance fitted to the lever (XLA only
reorders float math; bfloat16 rounds to 8 bits of mantissa; bucketing groups
the sentences differently; hashed dropout draws other masks). Timing lives in
benchmarks/train.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import query_chunks
from keras_transformer.training.losses import MaskedLoss, masked_loss
from keras_transformer.training.metrics import MaskedAccuracy, TargetTokens
from tests.helpers import tiny_transformer

VOCAB = 16
STEPS = 40


def copy_task(rows=128, seed=0):
    """Sentences of 2-10 tokens; the target repeats the source between [START] and [END]."""
    rng = np.random.default_rng(seed)
    sources = [rng.integers(4, VOCAB, size=rng.integers(2, 11)) for _ in range(rows)]
    targets = [np.concatenate([[2], s, [3]]) for s in sources]
    return sources, targets


def pad(rows, length):
    out = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def batches(sources, targets, bucketed, batch=16):
    """Padded batches in order, or batches of similar length padded to a bucket boundary."""
    order = np.arange(len(sources))
    if bucketed:
        order = np.argsort([len(s) for s in sources], kind="stable")
    out = []
    for i in range(0, len(order), batch):
        idx = order[i : i + batch]
        longest = max(len(sources[j]) for j in idx)
        length = 6 if bucketed and longest <= 6 else 12
        s = pad([sources[j] for j in idx], length if bucketed else longest)
        t = pad([targets[j] for j in idx], (length if bucketed else longest) + 2)
        out.append(((s, t[:, :-1]), t[:, 1:]))
    return out


def train(model, data, jit_compile=False):
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=MaskedLoss(), jit_compile=jit_compile)
    for step in range(STEPS):
        (s, t_in), t_out = data[step % len(data)]
        model.train_on_batch((s, t_in), t_out)
    return evaluate(model)


def evaluate(model):
    sources, targets = copy_task(rows=64, seed=1)
    (s, t_in), t_out = batches(sources, targets, bucketed=False, batch=64)[0]
    return float(masked_loss(t_out, model((s, t_in), training=False)))


@pytest.fixture(scope="module")
def baseline():
    sources, targets = copy_task()
    start = evaluate(tiny_transformer(vocab_size=VOCAB))
    end = train(tiny_transformer(vocab_size=VOCAB), batches(sources, targets, bucketed=False))
    # The task is learnable in STEPS steps: a lever that broke training shows.
    assert end < 0.8 * start, (start, end)
    return end


def test_xla_reaches_the_same_loss(baseline):
    sources, targets = copy_task()
    loss = train(
        tiny_transformer(vocab_size=VOCAB),
        batches(sources, targets, bucketed=False),
        jit_compile=True,
    )
    np.testing.assert_allclose(loss, baseline, rtol=2e-3)


def test_bucketing_reaches_the_same_loss(baseline):
    sources, targets = copy_task()
    loss = train(tiny_transformer(vocab_size=VOCAB), batches(sources, targets, bucketed=True))
    np.testing.assert_allclose(loss, baseline, rtol=0.1)


def test_bucket_padding_leaves_the_loss_unchanged():
    # Why bucketing is safe: padding to a bucket boundary instead of the
    # batch's longest sentence changes no real token's loss.
    model = tiny_transformer(vocab_size=VOCAB)
    sources, targets = copy_task(rows=8)
    tight = batches(sources, targets, bucketed=False, batch=8)[0]
    (s, t_in), t_out = tight
    wide = (np.pad(s, [(0, 0), (0, 7)]), np.pad(t_in, [(0, 0), (0, 7)]))
    want = float(masked_loss(t_out, model((s, t_in))))
    got = float(masked_loss(np.pad(t_out, [(0, 0), (0, 7)]), model(wide)))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_hashed_dropout_reaches_the_same_loss():
    # Against Keras' dropout at the same rate (the baseline has none), under
    # XLA, where the switch is meant to be used; every batch padded to 12 source
    # tokens, so that each run compiles one step.
    sources, targets = copy_task()
    data = [
        ((pad(s, 12), pad(t_in, 13)), pad(t_out, 13))
        for (s, t_in), t_out in batches(sources, targets, bucketed=False)
    ]
    start = evaluate(tiny_transformer(vocab_size=VOCAB))
    plain = train(tiny_transformer(vocab_size=VOCAB, dropout_rate=0.1), data, jit_compile=True)
    hashed = train(
        tiny_transformer(vocab_size=VOCAB, dropout_rate=0.1, hashed_dropout=True),
        data,
        jit_compile=True,
    )
    assert hashed < 0.8 * start, (start, hashed)
    np.testing.assert_allclose(hashed, plain, rtol=0.1)


def mixed_precision_loss(policy):
    sources, targets = copy_task()
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = tiny_transformer(vocab_size=VOCAB)
        assert model.compute_dtype == policy.split("_")[1]
        return train(model, batches(sources, targets, bucketed=False))
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.half_precision
def test_mixed_bfloat16_reaches_the_same_loss(baseline):
    np.testing.assert_allclose(mixed_precision_loss("mixed_bfloat16"), baseline, rtol=0.1)


@pytest.mark.half_precision
@pytest.mark.skipif(not tf.config.list_physical_devices("GPU"), reason="mixed_float16 needs a GPU")
def test_mixed_float16_on_gpu_reaches_the_same_loss(baseline):
    np.testing.assert_allclose(mixed_precision_loss("mixed_float16"), baseline, rtol=0.1)


def projected_ranks(model):
    """Records the rank of every feature tensor the model's training step projects to
    logits, and of every input to the first encoder and decoder feed-forward sublayers
    there (not in the symbolic call that builds the model before the step is traced)."""
    ranks = []
    in_training_step = []

    def spy(function):
        def recorded(features, *args, **kwargs):
            if in_training_step:
                ranks.append(features.shape.rank)
            return function(features, *args, **kwargs)

        return recorded

    keras_step = model.train_step

    def training_step(*args):
        in_training_step.append(True)
        try:
            return keras_step(*args)
        finally:
            in_training_step.pop()

    model.train_step = training_step
    model.project = spy(model.project)
    for layer in (model.encoder.enc_layers[0], model.decoder.dec_layers[0]):
        layer.ffn.call = spy(layer.ffn.call)
    return ranks


def test_skipping_padding_trains_like_the_padded_batch():
    # The default step runs the blocks on packed real tokens and projects only
    # the real target positions; Keras' step on the padded batch with full
    # logits must reach the same weights, loss and metrics.
    sources, targets = copy_task()
    data = batches(sources, targets, bucketed=True)
    runs = {}
    for skip in (True, False):
        model = tiny_transformer(vocab_size=VOCAB, skip_padding=skip)
        ranks = projected_ranks(model)
        model.compile(
            optimizer=keras.optimizers.Adam(3e-3),
            loss=MaskedLoss(label_smoothing=0.1),
            metrics=[MaskedAccuracy(), TargetTokens()],
        )
        logs = [
            model.train_on_batch(*data[step % len(data)], return_dict=True) for step in range(8)
        ]
        # (real tokens, d_model) features on the packed path, (batch, length, d_model) otherwise.
        assert set(ranks) == ({2} if skip else {3}), ranks
        runs[skip] = logs, model.get_weights()
    for got, want in zip(runs[True][0], runs[False][0]):
        assert got["target_tokens"] == want["target_tokens"]
        np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)
        np.testing.assert_allclose(got["masked_accuracy"], want["masked_accuracy"], rtol=1e-6)
    # Packed rows sum in another order; Adam's normalised steps can turn a
    # rounding difference in a near-zero gradient into up to ~1e-5 per step.
    for got, want in zip(*(runs[skip][1] for skip in (True, False))):
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_skipping_padding_with_dropout_reaches_the_same_loss():
    # With dropout the packed step draws its masks over real tokens only, so
    # the runs differ step by step; what they learn must not.
    sources, targets = copy_task()
    data = batches(sources, targets, bucketed=True)
    start = evaluate(tiny_transformer(vocab_size=VOCAB))
    padded = train(tiny_transformer(vocab_size=VOCAB, dropout_rate=0.1, skip_padding=False), data)
    packed = train(tiny_transformer(vocab_size=VOCAB, dropout_rate=0.1), data)
    assert packed < 0.8 * start, (start, packed)
    np.testing.assert_allclose(packed, padded, rtol=0.1)


@pytest.mark.parametrize("case", ["xla", "other_loss", "sample_weight"])
def test_full_logits_where_skipping_padding_does_not_apply(case):
    # XLA needs static shapes; another loss may count padding; per-example
    # weights are Keras' business: all take Keras' own step.
    sources, targets = copy_task(rows=16)
    (s, t_in), t_out = batches(sources, targets, bucketed=False)[0]
    model = tiny_transformer(vocab_size=VOCAB)
    ranks = projected_ranks(model)
    loss = (
        keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if case == "other_loss"
        else MaskedLoss()
    )
    model.compile(optimizer="adam", loss=loss, jit_compile=case == "xla")
    weights = np.ones(len(s), np.float32) if case == "sample_weight" else None
    model.train_on_batch((s, t_in), t_out, sample_weight=weights)
    assert set(ranks) == {3}, ranks


def test_query_chunks_train_like_whole_queries(monkeypatch):
    # At 64 tokens and head size 8 each attention product is 64 * 64 * 8,
    # twice TensorFlow's bound, so on CPU chunk_queries=True attends in two
    # query chunks (layers/query_chunks.py); it must learn what whole queries do.
    sources, targets = copy_task()
    data = [
        ((pad(s, 64), pad(t_in, 64)), pad(t_out, 64))
        for (s, t_in), t_out in batches(sources, targets, bucketed=False)
    ]
    splits = []
    even_sizes = query_chunks._even_sizes
    monkeypatch.setattr(
        query_chunks, "_even_sizes", lambda n, count: splits.append(count) or even_sizes(n, count)
    )
    whole = train(tiny_transformer(vocab_size=VOCAB), data)
    assert splits == []
    chunked = train(tiny_transformer(vocab_size=VOCAB, chunk_queries=True), data)
    if not tf.config.list_logical_devices("GPU"):
        # Two chunks are on offer (with lengths unknown at trace time, so is
        # every other count: the branch is picked at run time).
        assert 2 in splits, splits
    np.testing.assert_allclose(chunked, whole, rtol=1e-4)
