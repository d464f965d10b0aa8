"""Training throughput: keras_transformer vs the same model from KerasHub layers.

Real TED pt->en batches, the tutorial's hyperparameters (4 layers, d_model 128,
dff 512, 8 heads, ~8k vocabularies, max 128 tokens, 64 sentences a batch).
Every configuration trains with `model.fit`, the same optimizer (Adam with the
warmup schedule), and the same masked loss, in its own subprocess (clean
mixed-precision state, and its own peak resident memory). It prints
non-padding target tokens per second, the ratio to the KerasHub peer, the
model FLOPs utilisation against this machine's measured float32 matmul peak,
and the peak RSS.

    PYTHONPATH=. python benchmarks/train.py            # default, a few minutes
    PYTHONPATH=. python benchmarks/train.py --steps 50 # longer, steadier
    PYTHONPATH=. python benchmarks/train.py --rounds 3 # median of 3 interleaved runs each
    PYTHONPATH=. python benchmarks/train.py --configs A,B --paired  # side by side, step by step
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

HPARAMS = dict(num_layers=4, d_model=128, num_heads=8, dff=512, dropout_rate=0.1)
MAX_TOKENS = 128
BATCH = 64


def setup(
    model,
    batching,
    jit=False,
    mixed=False,
    hashed=False,
    attention_dropout=0.0,
    skip_padding=True,
    chunk_queries=False,
):
    """One configuration: which model, which batches, and which levers."""
    return dict(
        model=model,
        batching=batching,
        jit=jit,
        mixed=mixed,
        hashed=hashed,
        attention_dropout=attention_dropout,
        skip_padding=skip_padding,
        chunk_queries=chunk_queries,
    )


CONFIGS = {
    "ours_default": setup("ours", "padded"),
    "ours_bucketed": setup("ours", "bucketed"),
    # Keras' own step on the padded batch; the default steps without XLA run on
    # the real tokens only (Transformer(skip_padding=True)).
    "ours_bucketed_padded_step": setup("ours", "bucketed", skip_padding=False),
    # Long queries attend in chunks on TensorFlow's CPU kernels.
    "ours_bucketed_chunked": setup("ours", "bucketed", chunk_queries=True),
    "ours_bucketed_hashed": setup("ours", "bucketed", hashed=True),
    "ours_bucketed_xla": setup("ours", "bucketed", jit=True),
    "ours_bucketed_xla_hashed": setup("ours", "bucketed", jit=True, hashed=True),
    # KerasHub's `dropout` also drops attention weights; ours defaults to the paper's
    # attention_dropout=0. This row does the same regularization work as KerasHub.
    "ours_bucketed_xla_hashed_attdrop": setup(
        "ours", "bucketed", jit=True, hashed=True, attention_dropout=0.1
    ),
    "ours_bucketed_bf16": setup("ours", "bucketed", mixed=True),
    "ours_bucketed_xla_bf16": setup("ours", "bucketed", jit=True, mixed=True),
    "keras_hub_padded": setup("keras_hub", "padded"),
    "keras_hub_bucketed": setup("keras_hub", "bucketed"),
    "keras_hub_bucketed_xla": setup("keras_hub", "bucketed", jit=True),
}


# -- data -----------------------------------------------------------------


def load_vocabularies(corpus: str, cache: str) -> tuple[str, str]:
    from keras_transformer.text import tokenizers

    paths = []
    for lang in ("pt", "en"):
        path = os.path.join(cache, f"vocab.{lang}")
        if not os.path.exists(path):
            with open(os.path.join(corpus, f"train.{lang}"), encoding="utf-8") as f:
                texts = f.read().splitlines()
            start = time.perf_counter()
            vocab = tokenizers.learn_vocabulary(texts, vocab_size=8000)
            tokenizers.write_vocabulary(vocab, path)
            seconds = time.perf_counter() - start
            print(f"learned {lang} vocabulary: {len(vocab)} tokens in {seconds:.0f} s")
        paths.append(path)
    return paths[0], paths[1]


def text_pairs(corpus: str, count: int, seed: int = 0) -> list[tuple[str, str]]:
    """`count` TED (pt, en) training pairs in a seeded shuffled order."""
    texts = {}
    for lang in ("pt", "en"):
        with open(os.path.join(corpus, f"train.{lang}"), encoding="utf-8") as f:
            texts[lang] = f.read().splitlines()
    order = np.random.default_rng(seed).permutation(len(texts["pt"]))[:count]
    return [(texts["pt"][i], texts["en"][i]) for i in order]


def tokenizers_for(vocab_paths):
    from keras_transformer.text import tokenizers

    return [tokenizers.Tokenizer(tokenizers.read_vocabulary(p)) for p in vocab_paths]


def pad(rows, length):
    out = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def make_batch(sources, targets, source_length=None, target_length=None):
    target_in = [t[:-1] for t in targets]
    target_out = [t[1:] for t in targets]
    s_len = source_length or max(len(s) for s in sources)
    t_len = target_length or max(len(t) for t in target_in)
    return pad(sources, s_len), pad(target_in, t_len), pad(target_out, t_len)


def padded_batches(pairs, vocab_paths, count):
    """The tutorial's batching: 64 sentences in corpus order, padded to the batch's longest."""
    source_tokenizer, target_tokenizer = tokenizers_for(vocab_paths)
    pairs = pairs[: BATCH * count]
    sources = source_tokenizer.tokenize([p[0] for p in pairs])
    targets = target_tokenizer.tokenize([p[1] for p in pairs])
    # Targets keep MAX_TOKENS + 1 ids: target_in drops the last, target_out the first.
    sources = [np.asarray(r[:MAX_TOKENS], np.int32) for r in sources.numpy()]
    targets = [np.asarray(r[: MAX_TOKENS + 1], np.int32) for r in targets.numpy()]
    return [
        make_batch(sources[i : i + BATCH], targets[i : i + BATCH])
        for i in range(0, BATCH * count, BATCH)
    ]


def bucketed_batches(pairs, vocab_paths, count):
    """The library's batching (`data.make_batches`): 64 sentences of similar length, padded
    to their bucket's length, in the order the buckets fill (no shuffling)."""
    from keras_transformer.text import data

    source_tokenizer, target_tokenizer = tokenizers_for(vocab_paths)
    dataset = data.make_batches(
        pairs, source_tokenizer, target_tokenizer, BATCH, MAX_TOKENS, shuffle=False, cache=False
    )
    return [
        (s.numpy().astype(np.int32), ti.numpy().astype(np.int32), to.numpy().astype(np.int32))
        for (s, ti), to in dataset.take(count)
    ]


# -- one configuration (runs in its own process) -----------------------------


def build_model(config, vocab_sizes):
    """The configuration's model, compiled with the shared optimizer and masked loss."""
    from keras_transformer import Transformer
    from keras_transformer.training import MaskedLoss, make_optimizer

    src_vocab, tgt_vocab = vocab_sizes
    if config["model"] == "ours":
        model = Transformer(
            input_vocab_size=src_vocab,
            target_vocab_size=tgt_vocab,
            max_length=MAX_TOKENS,
            hashed_dropout=config["hashed"],
            attention_dropout=config["attention_dropout"],
            skip_padding=config["skip_padding"],
            chunk_queries=config["chunk_queries"],
            **HPARAMS,
        )
    else:
        model = common.keras_hub_transformer(
            input_vocab_size=src_vocab,
            target_vocab_size=tgt_vocab,
            max_length=MAX_TOKENS,
            **HPARAMS,
        )
    model.compile(
        optimizer=make_optimizer(HPARAMS["d_model"]), loss=MaskedLoss(), jit_compile=config["jit"]
    )
    return model


def load_batches(batches_path):
    with np.load(batches_path) as data:
        return [
            (data[f"s{i}"], data[f"ti{i}"], data[f"to{i}"]) for i in range(len(data.files) // 3)
        ]


def warmup_batches(batches, least):
    """One batch of every shape in `batches` (XLA compiles per shape), at least `least`."""
    shapes, warm = set(), []
    for b in batches:
        key = (b[0].shape, b[1].shape)
        if key not in shapes:
            shapes.add(key)
            warm.append(b)
    return (warm + batches)[: max(least, len(warm))]


def run_config(name: str, batches_path: str, vocab_sizes, warmup: int, out_path: str):
    import keras
    import tensorflow as tf

    config = CONFIGS[name]
    if config["mixed"]:
        keras.mixed_precision.set_global_policy(
            "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"
        )
    batches = load_batches(batches_path)
    keras.utils.set_random_seed(0)
    model = build_model(config, vocab_sizes)

    def dataset(items):
        def gen():
            for s, ti, to in items:
                yield (s, ti), to

        spec = tf.TensorSpec((None, None), tf.int32)
        return tf.data.Dataset.from_generator(gen, output_signature=((spec, spec), spec))

    # Warm up on one batch of every shape the timed batches use (XLA compiles per shape).
    start = time.perf_counter()
    model.fit(dataset(warmup_batches(batches, warmup)), epochs=1, verbose=0)
    warmup_s = time.perf_counter() - start

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])  # wait for the step to finish
            self.ends.append(time.perf_counter())

    timer = Timer()
    history = model.fit(dataset(batches), epochs=1, verbose=0, callbacks=[timer])
    # The first timed step is excluded (it absorbs the fit start-up).
    seconds = timer.ends[-1] - timer.ends[0]
    timed = batches[1:]
    tokens = int(sum(np.count_nonzero(to) for _, _, to in timed))
    padded_tokens = int(sum(to.size for _, _, to in timed))
    flops = common.train_flops(
        [n for s, _, _ in timed for n in np.count_nonzero(s, axis=1)],
        [n for _, _, to in timed for n in np.count_nonzero(to, axis=1)],
        HPARAMS["num_layers"],
        HPARAMS["d_model"],
        HPARAMS["dff"],
        vocab_sizes[1],
    )
    result = dict(
        name=name,
        tokens_per_s=tokens / seconds,
        step_s=seconds / len(timed),
        useful_flops_per_s=flops / seconds,
        target_padding=1 - tokens / padded_tokens,
        warmup_s=warmup_s,
        loss=float(history.history["loss"][-1]),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    with open(out_path, "w") as f:
        json.dump(result, f)


def run_paired(names, batches_path: str, vocab_sizes, warmup: int, out_path: str):
    """Trains the configurations side by side in one process, alternating step by step.

    Every batch is trained by each model in turn (the order alternating between
    batches), so a slow spell of the shared machine hits both alike; each step is
    timed on its own (`train_on_batch` returns once the step's loss is computed).
    This uses the same compiled train step as `fit`.
    """
    import keras

    batches = load_batches(batches_path)
    models = {}
    for name in names:
        keras.utils.set_random_seed(0)
        models[name] = build_model(CONFIGS[name], vocab_sizes)
    for model in models.values():
        for s, ti, to in warmup_batches(batches, warmup):
            model.train_on_batch((s, ti), to)
    step_s = {name: [] for name in names}
    for i, (s, ti, to) in enumerate(batches):
        for name in names if i % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            models[name].train_on_batch((s, ti), to)
            step_s[name].append(time.perf_counter() - start)
    tokens = [int(np.count_nonzero(to)) for _, _, to in batches]
    with open(out_path, "w") as f:
        json.dump(dict(step_s=step_s, tokens=tokens), f)


def same_setting_peer(name):
    """The KerasHub configuration with the same batches and the same XLA setting as `name`."""
    config = CONFIGS[name]
    return f"keras_hub_{config['batching']}{'_xla' if config['jit'] else ''}"


def report_paired(names, runs):
    """Prints tokens/s of each configuration and its ratios to KerasHub.

    `runs` holds one `run_paired` result per round. Ratios are of the total
    times, to the first configuration named, to the KerasHub one with the
    same XLA setting ("vs hub same") and to the fastest KerasHub one in the
    run ("vs hub best"). For "vs hub same" it also prints the quartiles of the
    per-step ratios: each compares two steps on the same batch a second
    apart, so they are little moved by the machine's slow spells.
    """
    tokens = sum(sum(run["tokens"]) for run in runs)
    steps = sum(len(run["tokens"]) for run in runs)
    seconds = {name: sum(sum(run["step_s"][name]) for run in runs) for name in names}
    first = names[0]
    hub = [name for name in names if CONFIGS[name]["model"] == "keras_hub"]
    hub_best = min(hub, key=seconds.get) if hub else None
    print(
        f"{'configuration':<34}{'tok/s':>8}{'s/step':>8}{'vs first':>10}{'vs hub same':>12}"
        f"{'vs hub best':>12}{'per step vs hub same (q1 median q3)':>38}"
    )
    for name in names:
        peer = same_setting_peer(name)
        vs_same, quartiles = "-", "-"
        if peer in seconds:
            vs_same = f"{seconds[peer] / seconds[name]:.2f}x"
            ratios = np.concatenate(
                [np.array(run["step_s"][peer]) / np.array(run["step_s"][name]) for run in runs]
            )
            quartiles = "  ".join(f"{q:.2f}x" for q in np.percentile(ratios, [25, 50, 75]))
        vs_best = f"{seconds[hub_best] / seconds[name]:.2f}x" if hub_best else "-"
        print(
            f"{name:<34}{tokens / seconds[name]:>8.0f}{seconds[name] / steps:>8.2f}"
            f"{seconds[first] / seconds[name]:>9.2f}x{vs_same:>12}{vs_best:>12}{quartiles:>38}"
        )


def run_in_process(mode_args, batches_path, sizes, args, out):
    """Runs this script with `mode_args` in a fresh process; its JSON result, or None."""
    cmd = [sys.executable, os.path.abspath(__file__), *mode_args]
    cmd += ["--batches", batches_path, "--vocab-sizes", ",".join(map(str, sizes))]
    cmd += ["--warmup", str(args.warmup), "--out", out]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        print(f"{' '.join(mode_args)}: FAILED\n{proc.stderr[-2000:]}")
        return None
    with open(out) as f:
        return json.load(f)


def run_config_process(name, paths, sizes, args):
    """Runs one configuration in a fresh process; its result dict, or None if it failed."""
    out = os.path.join(args.cache, f"result_{name}.json")
    batches = paths[CONFIGS[name]["batching"]]
    return run_in_process(["--run-config", name], batches, sizes, args, out)


def median_run(results):
    """The run with the median tokens/s (the lower middle one of an even count)."""
    ordered = sorted(results, key=lambda r: r["tokens_per_s"])
    return ordered[(len(ordered) - 1) // 2]


# -- driver -----------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=os.path.join("..", "shared", "corpora", "ted_pt_en"))
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "kt_bench_cache"))
    parser.add_argument("--steps", type=int, default=8, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=2, help="least warmup steps")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of every configuration, order alternating"
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="train the configurations side by side in one process, alternating steps "
        "(same batching, no mixed precision)",
    )
    parser.add_argument("--run-config", help=argparse.SUPPRESS)
    parser.add_argument("--run-paired", help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--vocab-sizes", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.run_config:
        sizes = tuple(int(v) for v in args.vocab_sizes.split(","))
        run_config(args.run_config, args.batches, sizes, args.warmup, args.out)
        return
    if args.run_paired:
        sizes = tuple(int(v) for v in args.vocab_sizes.split(","))
        run_paired(args.run_paired.split(","), args.batches, sizes, args.warmup, args.out)
        return
    names = args.configs.split(",")
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; choose from {list(CONFIGS)}")
    if args.paired:
        if len(names) < 2:
            parser.error("--paired needs at least two configurations")
        # Every configuration trains the same batches, so all must batch alike.
        if len({CONFIGS[name]["batching"] for name in names}) > 1:
            parser.error("--paired configurations must use the same batching")
        if any(CONFIGS[name]["mixed"] for name in names):
            parser.error("--paired cannot mix precisions in one process; leave out *_bf16")

    import tensorflow as tf

    os.makedirs(args.cache, exist_ok=True)
    corpus = args.corpus
    if not os.path.isdir(corpus):
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        corpus = os.path.join(here, "..", "shared", "corpora", "ted_pt_en")
    vocab_paths = load_vocabularies(corpus, args.cache)
    sizes = []
    for path in vocab_paths:
        with open(path, encoding="utf-8") as f:
            sizes.append(sum(1 for _ in f))
    pairs = text_pairs(corpus, count=BATCH * args.steps * 8)
    batch_sets = {
        "padded": padded_batches(pairs, vocab_paths, args.steps),
        "bucketed": bucketed_batches(pairs, vocab_paths, args.steps),
    }
    paths = {}
    for kind, batches in batch_sets.items():
        paths[kind] = os.path.join(args.cache, f"batches_{kind}_{args.steps}.npz")
        arrays = {}
        for i, (s, ti, to) in enumerate(batches):
            arrays.update({f"s{i}": s, f"ti{i}": ti, f"to{i}": to})
        np.savez(paths[kind], **arrays)

    peak = common.matmul_peak_gflops()
    print(f"float32 matmul peak: {peak:.0f} GFLOP/s  (TensorFlow {tf.__version__})")
    print(
        f"vocabularies: pt {sizes[0]}, en {sizes[1]}; {args.steps} timed steps of {BATCH} sentences"
    )
    if args.paired:
        runs = []
        for round_index in range(args.rounds):
            # Alternate which model takes the first step of each pair, round by round.
            order = names if round_index % 2 == 0 else names[::-1]
            out = os.path.join(args.cache, f"result_paired_{round_index + 1}.json")
            batches = paths[CONFIGS[names[0]]["batching"]]
            run = run_in_process(["--run-paired", ",".join(order)], batches, sizes, args, out)
            if run is None:
                return
            runs.append(run)
            line = ", ".join(
                f"{name} {sum(run['tokens']) / sum(run['step_s'][name]):.0f}" for name in names
            )
            print(f"  round {round_index + 1}: {line} tok/s", flush=True)
        print()
        report_paired(names, runs)
        return

    runs = {name: [] for name in names}
    for round_index in range(args.rounds):
        # Alternate the order so that a slow spell of the shared machine hits every
        # configuration alike; the table reports each one's median round.
        for name in names if round_index % 2 == 0 else names[::-1]:
            result = run_config_process(name, paths, sizes, args)
            if result is None:
                continue
            runs[name].append(result)
            print(
                f"  round {round_index + 1} {name}: {result['tokens_per_s']:.0f} tok/s "
                f"(warmup {result['warmup_s']:.0f} s)",
                flush=True,
            )
    results = {name: median_run(r) for name, r in runs.items() if r}

    print()
    print(
        f"{'configuration':<34}{'tok/s':>8}{'s/step':>8}{'pad%':>6}"
        f"{'vs hub padded':>14}{'vs hub same':>12}{'MFU':>7}{'RSS MB':>8}{'loss':>7}"
    )
    for name, r in results.items():
        ref = results.get("keras_hub_padded")
        same = results.get(same_setting_peer(name))
        vs_ref = f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if ref else "-"
        vs_same = f"{r['tokens_per_s'] / same['tokens_per_s']:.2f}x" if same else "-"
        print(
            f"{name:<34}{r['tokens_per_s']:>8.0f}{r['step_s']:>8.2f}"
            f"{100 * r['target_padding']:>6.0f}"
            f"{vs_ref:>14}{vs_same:>12}{100 * r['useful_flops_per_s'] / 1e9 / peak:>6.1f}%"
            f"{r['peak_rss_mb']:>8.0f}{r['loss']:>7.2f}"
        )


if __name__ == "__main__":
    main()
