"""Quality runs: train on a real corpus within a time budget, export, score BLEU/chrF.

    python benchmarks/quality.py multi30k            # en->de, Multi30k tok/, beam 5
    python benchmarks/quality.py ted                 # pt->en, TED talks, beam 4

Each run trains with `keras_transformer.training.train` (resumable: run it again to
continue), exports the best checkpoint in TF Serving layout, and scores the *exported*
SavedModel on the test set with sacrebleu (tokenize="none": these corpora are already
lowercased and tokenized). Results go to RUN_DIR/quality.json and are printed as a row of
the README's quality table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Model sizes: Multi30k follows the published reference point (fairseq "transformer_tiny":
# 4+4 layers, d_model 128, FFN 256, 4 heads); TED is the TensorFlow tutorial's setup exactly
# (no label smoothing), so its accuracy compares with the tutorial's 0.636 after 30 epochs.
SETUPS = {
    "multi30k": {
        "files": ("multi30k/tok/train.lc.norm.tok.en", "multi30k/tok/train.lc.norm.tok.de"),
        "val": ("multi30k/tok/val.lc.norm.tok.en", "multi30k/tok/val.lc.norm.tok.de"),
        "test": (
            "multi30k/tok/test_2016_flickr.lc.norm.tok.en",
            "multi30k/tok/test_2016_flickr.lc.norm.tok.de",
        ),
        "beam": 5,
        "training": {
            "num_layers": 4,
            "d_model": 128,
            "num_heads": 4,
            "dff": 256,
            "dropout_rate": 0.1,
            "label_smoothing": 0.1,
            "tie_embeddings": True,
            "vocab_size": 8000,
            "max_tokens": 64,
            "batch_size": 128,
            "warmup_steps": 2000,
            "epochs": 200,
        },
    },
    "ted": {
        "files": ("ted_pt_en/train.pt", "ted_pt_en/train.en"),
        "val": ("ted_pt_en/dev.pt", "ted_pt_en/dev.en"),
        "test": ("ted_pt_en/test.pt", "ted_pt_en/test.en"),
        "beam": 4,
        "training": {
            "num_layers": 4,
            "d_model": 128,
            "num_heads": 8,
            "dff": 512,
            "dropout_rate": 0.1,
            "label_smoothing": 0.0,
            "vocab_size": 8000,
            "max_tokens": 128,
            "batch_size": 64,
            "warmup_steps": 4000,
            "epochs": 200,
        },
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", choices=sorted(SETUPS))
    parser.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    parser.add_argument("--corpora", default=str(ROOT.parent / "shared" / "corpora"))
    parser.add_argument("--run-dir", default=None, help="default: runs/quality_<corpus>")
    parser.add_argument("--export-root", default=str(ROOT / "saved_models"))
    parser.add_argument("--beam", type=int, default=None, help="beam width for scoring")
    parser.add_argument("--eval-only", action="store_true", help="skip training")
    args = parser.parse_args()

    from keras_transformer import evaluation, export, training
    from keras_transformer import run_dir as run_dir_lib
    from keras_transformer.run_dir import load_model

    setup = SETUPS[args.corpus]
    corpora = Path(args.corpora)
    run_dir = Path(args.run_dir or ROOT / "runs" / f"quality_{args.corpus}")
    config = dict(
        setup["training"],
        corpus="files",
        src=str(corpora / setup["files"][0]),
        tgt=str(corpora / setup["files"][1]),
        val_src=str(corpora / setup["val"][0]),
        val_tgt=str(corpora / setup["val"][1]),
        time_budget_minutes=args.minutes,
    )
    started = time.time()
    if not args.eval_only:
        training.train(config, run_dir, verbose=2)
    train_seconds = sum(e.get("epoch_seconds", 0.0) for e in run_dir_lib.read_history(run_dir))
    print(
        f"training: {train_seconds / 60:.1f} min over {len(run_dir_lib.read_history(run_dir))} "
        f"epochs (this call: {(time.time() - started) / 60:.1f} min)"
    )

    export_dir = export.export_run(run_dir, args.export_root, name=f"quality_{args.corpus}")
    beam = args.beam or setup["beam"]
    test_src, test_ref = (corpora / p for p in setup["test"])
    results = {}
    for label, width in (("greedy", None), (f"beam{beam}", beam)):
        result = evaluation.evaluate(
            export_dir,
            test_src,
            test_ref,
            tokenize="none",
            beam_width=width,
            output_dir=run_dir / f"test_{label}",
        )
        print(f"{label}: {evaluation.summary_line(result)}")
        results[label] = result
    history = run_dir_lib.read_history(run_dir)
    summary = {
        "corpus": args.corpus,
        "parameters": int(load_model(run_dir).count_params()),
        "model": {k: setup["training"][k] for k in ("num_layers", "d_model", "num_heads", "dff")},
        "epochs": len(history),
        "training_minutes": round(train_seconds / 60, 1),
        "best_val_masked_accuracy": max(e.get("val_masked_accuracy", 0) for e in history),
        "export": str(export_dir),
        "scores": {k: {"bleu": v["bleu"], "chrf": v["chrf"]} for k, v in results.items()},
        "bleu_signature": results[f"beam{beam}"]["bleu_signature"],
    }
    (run_dir / "quality.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
