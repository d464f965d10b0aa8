"""`keras-transformer export`: a training run's best checkpoint written as a SavedModel."""

from __future__ import annotations

import argparse

from keras_transformer.cli.common import COMMANDS, add_common_flags, require_positive
from keras_transformer.inference.batch_decoding import (
    DEFAULT_MAX_LENGTH,
    DEFAULT_MAX_SOURCE_LENGTH,
    DecodingOptions,
)
from keras_transformer.inference.export import (
    DEFAULT_EXPORT_ROOT,
    EXPORT_DTYPES,
    SIGNATURE_NAMES,
    export_run,
)
from keras_transformer.training.run_dir import BEST_CHECKPOINT, CONFIG_FILE


def add_export_parser(subparsers) -> None:
    defaults = DecodingOptions()
    parser = subparsers.add_parser(
        "export",
        help=COMMANDS["export"],
        description="Write RUN_DIR's best checkpoint with its tokenizers to "
        "EXPORT_ROOT/NAME/VERSION/ (TF Serving layout), computing in float32 even if the "
        "run trained under --mixed-precision, or in bfloat16 (--compute-dtype).",
    )
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help=f"a training run directory (holds {CONFIG_FILE} and {BEST_CHECKPOINT})",
    )
    parser.add_argument("--name", required=True, help="model name under the export root")
    parser.add_argument(
        "--export-root",
        default=DEFAULT_EXPORT_ROOT,
        help="directory of TF Serving models (default: %(default)s)",
    )
    parser.add_argument(
        "--version", type=int, default=None, help="integer version (default: the next free one)"
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="most tokens a translation may have (default: an imported checkpoint's "
        f"generation settings; else {DEFAULT_MAX_LENGTH}, or the model's max_length if smaller)",
    )
    parser.add_argument(
        "--max-source-length",
        type=int,
        default=None,
        metavar="N",
        help="cut sources at N tokens, [START] and [END] included, and flag them in the "
        "source_truncated output (default: the run's max_tokens, the longest source it "
        f"trained on; {DEFAULT_MAX_SOURCE_LENGTH} for runs that do not record it)",
    )
    parser.add_argument(
        "--sub-batch-size",
        type=int,
        default=defaults.sub_batch_size,
        metavar="N",
        help="rows decoded together inside one call: bounds a request's memory and the wait "
        "it imposes on other requests (default: %(default)s)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=defaults.in_flight,
        metavar="N",
        help="searches run side by side within --sub-batch-size rows, each on its share: "
        "one search keeps about one core busy; twice the cores speeds a large batch "
        "translated alone, but slows small requests served beside it (default: %(default)s)",
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile greedy and beam search with XLA: faster on CPU at small batches once "
        "compiled, but each new input shape compiles first; TF Serving then needs "
        "--xla_cpu_compilation_enabled=true (default: plain TensorFlow ops)",
    )
    parser.add_argument(
        "--average-last",
        type=int,
        default=None,
        metavar="N",
        help="export the average of the run's last N epoch checkpoints (kept when trained "
        "with --keep-epoch-checkpoints) (default: the best checkpoint)",
    )
    parser.add_argument(
        "--compute-dtype",
        choices=EXPORT_DTYPES,
        default="float32",
        help="what the export's weights and matrix products are in: bfloat16 halves the "
        "weights and speeds decoding on CPUs with AVX512_BF16 or AMX under TensorFlow's "
        "oneDNN kernels, and is slower than float32 elsewhere; softmax, log-probabilities, "
        "layer norms' statistics and scores stay float32 (default: %(default)s)",
    )
    parser.add_argument(
        "--broadcast-attention",
        action="store_true",
        help="attend with broadcast products at every row count, not batched matmuls from "
        "16 rows: for a model server on TensorFlow's oneDNN kernels, where they took 43%% "
        "less memory growth and answered 24%% more small requests under load; slower on "
        "Eigen's kernels (default: matmuls from 16 rows)",
    )
    add_beam_flags(parser, defaults)
    parser.add_argument(
        "--signatures",
        default=None,
        metavar="NAME[,NAME...]",
        help="export only these signatures, comma-separated, of "
        f"{', '.join(SIGNATURE_NAMES)}: faster to export and lighter to serve, and "
        "`translate`, `score` and `evaluate` then refuse what the export lacks (default: all)",
    )
    add_common_flags(parser)
    parser.set_defaults(func=run_export)


# Where an imported checkpoint's generation settings give the default (`export_run`).
_FROM_CHECKPOINT = "an imported checkpoint's generation settings; else"


def _early_stopping(text: str) -> bool | str:
    """--early-stopping's value: true, false or never (transformers' `early_stopping`)."""
    values = {"true": True, "false": False, "never": "never"}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected true, false or never, got {text!r}")
    return values[text.lower()]


def add_beam_flags(parser: argparse.ArgumentParser, defaults: DecodingOptions) -> None:
    """The length cap and beam search's flags, each unset unless given, so that
    `export_run` takes an imported checkpoint's generation settings for the others."""
    parser.add_argument(
        "--max-length-a",
        type=float,
        default=None,
        help="a row also stops after A * its source tokens + B tokens (default: "
        f"{_FROM_CHECKPOINT} {defaults.max_length_a})",
    )
    parser.add_argument(
        "--max-length-b",
        type=float,
        default=defaults.max_length_b,
        help="B of that cap (default: %(default)s)",
    )
    parser.add_argument(
        "--beam-width",
        type=int,
        default=None,
        help=f"width of the beam_search signature (default: {_FROM_CHECKPOINT} "
        f"{defaults.beam_width})",
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=None,
        help="beam search's length penalty: GNMT's alpha, or with --length-normalization "
        "transformers its length_penalty (log-probability / length ** it; negative "
        f"favours short translations) (default: {_FROM_CHECKPOINT} "
        f"{defaults.length_penalty_alpha})",
    )
    parser.add_argument(
        "--length-normalization",
        choices=("gnmt", "transformers"),
        default=None,
        help="how beam search ranks and stops: GNMT's length penalty, or transformers' "
        "generate() (its length normalization and --early-stopping), which decodes an "
        f"imported checkpoint as transformers does (default: {_FROM_CHECKPOINT} "
        f"{defaults.length_normalization})",
    )
    parser.add_argument(
        "--early-stopping",
        type=_early_stopping,
        default=None,
        metavar="{true,false,never}",
        help="transformers' early_stopping, with --length-normalization transformers: stop "
        "a sentence at beam-width finished hypotheses (true), when its best unfinished one "
        "would not beat them at its current length (false), or at the longest it may "
        f"reach (never) (default: {_FROM_CHECKPOINT} "
        f"{str(defaults.early_stopping).lower()})",
    )


def run_export(args: argparse.Namespace) -> int:

    require_positive(
        args,
        "version",
        "max_length",
        "max_source_length",
        "sub_batch_size",
        "in_flight",
        "beam_width",
        "average_last",
    )
    signatures = None  # checked by export_run before the run loads
    if args.signatures is not None:
        signatures = [name.strip() for name in args.signatures.split(",")]
    # Settings given only: export_run takes the others from the run.
    given = {
        name: value
        for name, value in (
            ("max_length", args.max_length),
            ("max_length_a", args.max_length_a),
            ("beam_width", args.beam_width),
            ("length_penalty_alpha", args.length_penalty),
            ("length_normalization", args.length_normalization),
            ("early_stopping", args.early_stopping),
        )
        if value is not None
    }
    path = export_run(
        args.run_dir,
        args.export_root,
        args.name,
        args.version,
        average_last=args.average_last,
        max_source_length=args.max_source_length,
        sub_batch_size=args.sub_batch_size,
        in_flight=args.in_flight,
        jit_compile=args.jit_compile,
        max_length_b=args.max_length_b,
        signatures=signatures,
        compute_dtype=args.compute_dtype,
        matmul_attention=not args.broadcast_attention,
        **given,
    )
    print(path)
    return 0
