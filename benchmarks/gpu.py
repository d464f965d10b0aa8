"""Training throughput on an accelerator: ours vs KerasHub's same-size model, paired.

Runs where only Keras, keras-hub and JAX (or PyTorch) are installed, no TensorFlow:
the batches come from prepared data (`keras-transformer prepare`, read by
`keras_transformer.text.prepared`). For each size, both models train the same batches
side by side in one process, step by step in alternating order (as
`benchmarks/train.py --paired` does on CPU), after one warmup step on every batch
shape (XLA compiles per shape). It prints real target tokens a second, MFU
against the device's published dense peak for the run's precision, and the ratio.

    KERAS_BACKEND=jax PYTHONPATH=. python benchmarks/gpu.py --data DIR
    KERAS_BACKEND=jax PYTHONPATH=. python benchmarks/gpu.py --data DIR --sizes small --steps 20

Sizes: "small" is the small preset's model (4+4 layers, d_model 128, float32),
"base" the paper's base model (6+6 layers, d_model 512, dff 2048, mixed
bfloat16); "tiny" is for the tests.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

SIZES = {
    "tiny": dict(num_layers=1, d_model=32, num_heads=2, dff=64, precision="float32"),
    "small": dict(num_layers=4, d_model=128, num_heads=4, dff=256, precision="float32"),
    "base": dict(num_layers=6, d_model=512, num_heads=8, dff=2048, precision="mixed_bfloat16"),
}

# Published dense peaks in TFLOP/s (NVIDIA's data sheets, without sparsity): float32
# matmuls run as TF32 on these cards under JAX's default precision.
PEAK_TFLOPS = {
    "H100": {"float32": 494.7, "mixed_bfloat16": 989.4},  # SXM
    "H200": {"float32": 494.7, "mixed_bfloat16": 989.4},
    "A100": {"float32": 156.0, "mixed_bfloat16": 312.0},
}


def device_name() -> str:
    import keras

    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        return f"{device.platform}: {getattr(device, 'device_kind', device)}"
    if keras.backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            return f"gpu: {torch.cuda.get_device_name(0)}"
        return "cpu"
    return keras.backend.backend()


def peak_tflops(device: str, precision: str, given: float | None) -> float | None:
    if given:
        return given
    for card, peaks in PEAK_TFLOPS.items():
        if card in device:
            return peaks[precision]
    return None


def build(kind: str, size: dict, vocab_sizes, max_length: int):
    import keras

    from keras_transformer import MaskedLoss, Transformer, make_optimizer

    sizes = {key: value for key, value in size.items() if key != "precision"}
    keras.utils.set_random_seed(0)
    if kind == "ours":
        model = Transformer(
            input_vocab_size=vocab_sizes[0],
            target_vocab_size=vocab_sizes[1],
            max_length=max_length,
            **sizes,
        )
    else:
        model = common.keras_hub_transformer(
            input_vocab_size=vocab_sizes[0],
            target_vocab_size=vocab_sizes[1],
            max_length=max_length,
            **sizes,
        )
    model.compile(optimizer=make_optimizer(size["d_model"]), loss=MaskedLoss(), jit_compile=True)
    return model


def batches_of(data_dir: str, batch_tokens: int, steps: int):
    """The first `steps` training batches of the prepared data (bucketed, shuffled)."""
    from keras_transformer.text import prepared

    data = prepared.PreparedData(data_dir)
    stream = prepared.PreparedBatches(
        data.split("train"), batch_tokens=batch_tokens, shuffle=True, seed=0, repeat=True
    )
    return data, [stream[i] for i in range(steps)]


def run_size(name: str, data_dir: str, steps: int, batch_tokens: int, peak_given) -> dict:
    import keras

    size = SIZES[name]
    keras.mixed_precision.set_global_policy(
        "float32" if size["precision"] == "float32" else size["precision"]
    )
    data, batches = batches_of(data_dir, batch_tokens, steps)
    max_length = max(max(x[0].shape[1], x[1].shape[1]) for x, _ in batches)
    kinds = ("ours", "keras_hub")
    models = {kind: build(kind, size, data.vocab_sizes, max_length) for kind in kinds}
    shapes = {}
    for x, y in batches:
        shapes.setdefault((x[0].shape, x[1].shape), (x, y))
    start = time.perf_counter()
    for model in models.values():
        for x, y in shapes.values():
            model.train_on_batch(x, y)
    warmup_s = time.perf_counter() - start
    seconds = {kind: 0.0 for kind in models}
    losses = {}
    for i, (x, y) in enumerate(batches):
        for kind in list(models) if i % 2 == 0 else list(models)[::-1]:
            start = time.perf_counter()
            losses[kind] = float(models[kind].train_on_batch(x, y))  # waits for the step
            seconds[kind] += time.perf_counter() - start
    tokens = sum(int(np.count_nonzero(y)) for _, y in batches)
    flops = common.train_flops(
        [n for x, _ in batches for n in np.count_nonzero(x[0], axis=1)],
        [n for _, y in batches for n in np.count_nonzero(y, axis=1)],
        size["num_layers"],
        size["d_model"],
        size["dff"],
        data.vocab_sizes[1],
    )
    device = device_name()
    peak = peak_tflops(device, size["precision"], peak_given)
    result = dict(
        size=name,
        precision=size["precision"],
        device=device,
        backend=keras.backend.backend(),
        steps=steps,
        target_tokens=tokens,
        warmup_s=warmup_s,
        peak_tflops=peak,
    )
    for kind, total in seconds.items():
        result[kind] = dict(
            tokens_per_s=tokens / total,
            step_s=total / steps,
            mfu=(flops / total / 1e12 / peak) if peak else None,
            last_loss=losses[kind],
        )
    result["ratio"] = result["ours"]["tokens_per_s"] / result["keras_hub"]["tokens_per_s"]
    return result


def report(result: dict) -> None:
    print(
        f"{result['size']} ({result['precision']}, {result['backend']} on {result['device']}, "
        f"{result['steps']} steps, warmup {result['warmup_s']:.0f} s)"
    )
    for kind in ("ours", "keras_hub"):
        entry = result[kind]
        mfu = f"{entry['mfu']:.1%}" if entry["mfu"] is not None else "n/a (give --peak-tflops)"
        print(
            f"  {kind:10s} {entry['tokens_per_s']:>12,.0f} target tokens/s  "
            f"{entry['step_s'] * 1000:8.1f} ms/step  MFU {mfu}  loss {entry['last_loss']:.3f}"
        )
    print(f"  ours / KerasHub: {result['ratio']:.2f}x")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a prepared data directory")
    parser.add_argument("--sizes", default="small,base", help="comma-separated: tiny, small, base")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per model and size")
    parser.add_argument("--batch-tokens", type=int, default=8192, help="tokens a batch")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak, if not listed")
    parser.add_argument("--out", help="also write the results here as JSON")
    args = parser.parse_args(argv)
    sizes = args.sizes.split(",")
    unknown = [size for size in sizes if size not in SIZES]
    if unknown:
        parser.error(f"unknown sizes {unknown}; choose from {sorted(SIZES)}")
    if not os.path.isfile(os.path.join(args.data, "index.json")):
        parser.error(f"{args.data} is not a prepared data directory (no index.json)")
    results = []
    for size in sizes:
        results.append(run_size(size, args.data, args.steps, args.batch_tokens, args.peak_tflops))
        report(results[-1])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
