"""Quality runs: train within a time budget, choose on validation, export, score the export.

    python benchmarks/quality.py multi30k --minutes 60     # en->de, raw cased Multi30k
    python benchmarks/quality.py ted --minutes 60          # pt->en, TED as released
    python benchmarks/quality.py ted --preset tutorial     # the tutorial's settings
    python benchmarks/quality.py --src train.fr --tgt train.en --val-src dev.fr \\
        --val-tgt dev.en --test-src test.fr --test-ref test.en --run-dir runs/fr_en

A run
1. trains with `keras_transformer.training.train` under `--preset` (default small; every
   training flag overrides it) for `--minutes` of training (resumable: run it again);
2. chooses on the *validation* set only: the best checkpoint (by validation loss) or an
   average of the last 5, 10, ... epochs' checkpoints it kept (greedy BLEU), then the beam's
   length penalty: of those tried (0.6, 1.0, 1.4, extended upward while the largest tried
   wins), the smallest whose BLEU is within one standard error of the best's
   (`choose_length_penalty`);
3. exports the choice in TF Serving layout and scores the *exported SavedModel* on the test
   set, greedy and beam, with sacrebleu: BLEU and chrF on the raw reference (`--tokenize`,
   "13a" by default, "none" for pre-tokenized corpora such as TED as released) and, given
   `--test-ref-moses`, BLEU of the output put into Moses form (lowercased, punctuation-
   normalized, tokenized by sacremoses; `evaluation.moses_form`) against that reference.
Results go to RUN_DIR/quality.json and are printed as a row of the README's quality table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU

from keras_transformer import evaluation
from keras_transformer.cli import settings
from keras_transformer.inference import export
from keras_transformer.inference.translator import Translator
from keras_transformer.training import run_dir as run_dir_lib

ROOT = Path(__file__).resolve().parent.parent

CORPORA = ROOT.parent / "shared" / "corpora"

# Built-in setups: data paths (relative to --corpora), languages and scoring.
SETUPS = {
    "multi30k": {
        "src": "multi30k/train.en",
        "tgt": "multi30k/train.de",
        "val_src": "multi30k/val.en",
        "val_tgt": "multi30k/val.de",
        "test_src": "multi30k/test_2016_flickr.en",
        "test_ref": "multi30k/test_2016_flickr.de",
        "test_ref_moses": "multi30k/tok/test_2016_flickr.lc.norm.tok.de",
        "target_lang": "de",
        "tokenize": "13a",
    },
    "ted": {
        "src": "ted_pt_en/train.pt",
        "tgt": "ted_pt_en/train.en",
        "val_src": "ted_pt_en/dev.pt",
        "val_tgt": "ted_pt_en/dev.en",
        "test_src": "ted_pt_en/test.pt",
        "test_ref": "ted_pt_en/test.en",
        "target_lang": "en",
        "tokenize": "none",  # released lowercased and tokenized
    },
}
PATH_KEYS = ("src", "tgt", "val_src", "val_tgt", "test_src", "test_ref", "test_ref_moses")
# Length penalties tried on validation; while the largest tried scores best, the next one up
# (+0.4, to at most 3.0) is tried too, so below 3.0 a choice never rests on the grid's edge.
LENGTH_PENALTIES = (0.6, 1.0, 1.4)
LENGTH_PENALTY_STEP = 0.4
MAX_LENGTH_PENALTY = 3.0
# Resamples of the validation set behind the standard error of a BLEU difference.
BOOTSTRAP_SAMPLES = 1000
# Averages tried on validation besides the best checkpoint: the last 5, 10, 20, ... epochs'
# checkpoints, up to as many as the run keeps (that number itself always among them).
SMALLEST_AVERAGE = 5


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("setup", nargs="?", choices=sorted(SETUPS), help="a built-in corpus")
    parser.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    parser.add_argument("--corpora", default=str(CORPORA), help="root of the built-in setups")
    parser.add_argument("--run-dir", default=None, help="default: runs/quality_<name>")
    parser.add_argument("--name", default=None, help="run and export name (default: the setup)")
    parser.add_argument("--export-root", default=str(ROOT / "saved_models"))
    parser.add_argument("--test-src", help="test sources (overrides the setup's)")
    parser.add_argument("--test-ref", help="test references, raw or as --tokenize expects")
    parser.add_argument("--test-ref-moses", help="test references in Moses form (optional)")
    parser.add_argument("--target-lang", help="target language code, for the Moses form")
    parser.add_argument(
        "--tokenize",
        help='sacrebleu tokenizer: "13a" (raw text, default) or "none" (pre-tokenized text)',
    )
    parser.add_argument("--beam", type=int, default=5, help="beam width (default: 5)")
    parser.add_argument("--eval-only", action="store_true", help="skip training")
    settings.add_config_flags(parser)
    args = parser.parse_args(argv)
    setup = SETUPS.get(args.setup, {})
    for key in PATH_KEYS:  # a flag beats the setup; the setup's paths are under --corpora
        if getattr(args, key, None) is None and key in setup:
            setattr(args, key, str(Path(args.corpora) / setup[key]))
    args.target_lang = args.target_lang or setup.get("target_lang")
    args.tokenize = args.tokenize or setup.get("tokenize", evaluation.DEFAULT_TOKENIZE)
    args.preset = args.preset or "small"
    args.name = args.name or args.setup or "custom"
    missing = [
        k
        for k in ("src", "tgt", "val_src", "val_tgt", "test_src", "test_ref")
        if not getattr(args, k)
    ]
    if missing:
        parser.error("give a setup or --" + ", --".join(k.replace("_", "-") for k in missing))
    if args.test_ref_moses and not args.target_lang:
        parser.error("--test-ref-moses needs --target-lang")
    return args


def in_memory_translate(translator: Translator, beam: int | None):
    def translate(batch):
        method = "greedy" if beam is None else "beam"
        out = translator(batch, method=method, beam_width=beam)["translation"]
        return [text.decode("utf-8") for text in out.numpy()]

    return translate


def search_length_penalty(score) -> dict:
    """{alpha: score(alpha)} over LENGTH_PENALTIES, extended upward one step at a time
    while the largest alpha tried scores best."""
    scores = {}
    alphas = list(LENGTH_PENALTIES)
    while alphas:
        alpha = alphas.pop(0)
        scores[alpha] = score(alpha)
        next_alpha = round(alpha + LENGTH_PENALTY_STEP, 1)
        if not alphas and max(scores, key=scores.get) == alpha and next_alpha <= MAX_LENGTH_PENALTY:
            alphas.append(next_alpha)
    return scores


def bleu_difference_standard_error(
    hypotheses_a, hypotheses_b, references, tokenize: str, samples: int = BOOTSTRAP_SAMPLES
) -> float:
    """The standard error of BLEU(a) - BLEU(b) on one set of references, by paired bootstrap
    resampling of its sentences (Koehn, 2004): each resample scores both outputs on the same
    sentences, so what the two have in common does not count as noise. Seeded: the same
    outputs give the same figure."""
    bleu = BLEU(tokenize=tokenize)
    streams = [list(references)]
    # Per-sentence BLEU statistics, and a score from their sum: what sacrebleu's own paired
    # significance tests use, so resampling needs no new tokenizing or n-gram counting.
    stats_a = np.asarray(bleu._extract_corpus_statistics(list(hypotheses_a), streams))
    stats_b = np.asarray(bleu._extract_corpus_statistics(list(hypotheses_b), streams))
    picks = np.random.default_rng(0).integers(0, len(stats_a), size=(samples, len(stats_a)))
    differences = [
        bleu._compute_score_from_stats(stats_a[rows].sum(0)).score
        - bleu._compute_score_from_stats(stats_b[rows].sum(0)).score
        for rows in picks
    ]
    return float(np.std(differences, ddof=1))


def choose_length_penalty(scores: dict, standard_error) -> float:
    """The smallest length penalty whose BLEU is within one standard error of the best one's
    (the one-standard-error rule of model selection), `standard_error(alpha, best)` being
    that of the difference between the two.

    The largest penalty that validation scores best often sits just below a cliff (a penalty
    high enough lets a beam's hypotheses run on, repeating themselves, until the length
    cap), and where the cliff falls moves from one set of sentences to the next; the smallest
    penalty that validation cannot tell from the best keeps away from it.
    """
    best = max(scores, key=scores.get)
    return min(
        alpha for alpha in scores if scores[best] - scores[alpha] <= standard_error(alpha, best)
    )


def average_candidates(kept: int) -> list[int]:
    """How many of the last `kept` epoch checkpoints to average, each tried on validation:
    SMALLEST_AVERAGE doubled while below `kept`, then `kept` itself (none below 2)."""
    if kept < 2:
        return []
    counts = []
    count = SMALLEST_AVERAGE
    while count < kept:
        counts.append(count)
        count *= 2
    return counts + [kept]


def choose_on_validation(args, run_dir: Path, config: dict) -> dict:
    """Checkpoint (best or averaged) by greedy validation BLEU, then the length penalty by
    beam validation BLEU (`choose_length_penalty`). Only the validation set is read here."""
    sources = evaluation.read_lines(args.val_src)
    references = evaluation.read_lines(args.val_tgt)
    tokenize = args.tokenize

    def bleu(translator, beam=None, outputs=None):
        """Validation BLEU; the translations are appended to `outputs` if given."""
        translate = in_memory_translate(translator, beam)

        def recorded(batch):
            translations = translate(batch)
            if outputs is not None:
                outputs.extend(translations)
            return translations

        result = evaluation.evaluate(
            recorded, sources, references, tokenize=tokenize, progress=False
        )
        return result["bleu"]

    source_tokenizer, target_tokenizer = run_dir_lib.load_tokenizers(run_dir)
    kept = min(config.get("keep_epoch_checkpoints", 0), len(run_dir_lib.epoch_checkpoints(run_dir)))
    candidates = {"best": None}
    for count in average_candidates(kept):
        candidates[f"average_last_{count}"] = count
    greedy = {}
    for label, average_last in candidates.items():
        model = run_dir_lib.load_model(run_dir, average_last=average_last)
        greedy[label] = bleu(Translator(model, source_tokenizer, target_tokenizer))
        print(f"validation greedy BLEU, {label}: {greedy[label]:.2f}", flush=True)
    checkpoint = max(greedy, key=greedy.get)
    model = run_dir_lib.load_model(run_dir, average_last=candidates[checkpoint])

    beam_outputs = {}

    def beam_bleu(alpha):
        translator = Translator(
            model, source_tokenizer, target_tokenizer, length_penalty_alpha=alpha
        )
        result = bleu(translator, args.beam, outputs=beam_outputs.setdefault(alpha, []))
        print(f"validation beam{args.beam} BLEU, length penalty {alpha}: {result:.2f}")
        return result

    beam = search_length_penalty(beam_bleu)
    best = max(beam, key=beam.get)
    errors = {
        alpha: bleu_difference_standard_error(
            beam_outputs[best], beam_outputs[alpha], references, tokenize
        )
        for alpha in beam
    }
    alpha = choose_length_penalty(beam, lambda a, b: errors[a])
    print(f"length penalty {alpha}: the smallest within one standard error of {best}'s BLEU")
    return {
        "checkpoint": checkpoint,
        "average_last": candidates[checkpoint],
        "length_penalty_alpha": alpha,
        "length_penalty_best": best,
        "validation_bleu_greedy": greedy,
        "validation_bleu_beam": {str(k): v for k, v in beam.items()},
        "validation_bleu_beam_standard_error": {str(k): round(v, 2) for k, v in errors.items()},
    }


def score_export(args, export_dir: Path, run_dir: Path) -> dict:
    sources = evaluation.read_lines(args.test_src)
    references = evaluation.read_lines(args.test_ref)
    moses_refs = evaluation.read_lines(args.test_ref_moses) if args.test_ref_moses else None
    scores = {}
    for label, width in (("greedy", None), (f"beam{args.beam}", args.beam)):
        result = evaluation.evaluate(
            str(export_dir),
            sources,
            references,
            tokenize=args.tokenize,
            beam_width=width,
            output_dir=run_dir / f"test_{label}",
        )
        print(f"test {label}: {evaluation.summary_line(result)}", flush=True)
        row = {key: result[key] for key in ("bleu", "chrf", "bleu_signature", "chrf_signature")}
        if moses_refs is not None:
            hypotheses = evaluation.read_lines(result["translations_file"])
            moses = evaluation.score(
                evaluation.moses_form(hypotheses, args.target_lang), moses_refs, tokenize="none"
            )
            print(f"test {label}, Moses form: {evaluation.summary_line(moses)}", flush=True)
            row["moses_bleu"] = moses["bleu"]
            row["moses_bleu_signature"] = moses["bleu_signature"]
        scores[label] = row
    return scores


def main(argv=None) -> None:
    args = parse_args(argv)
    run_dir = Path(args.run_dir or ROOT / "runs" / f"quality_{args.name}")
    config = settings.config_from_args(args, base={"time_budget_minutes": args.minutes})
    started = time.time()
    if not args.eval_only:
        from keras_transformer.training import train

        train(config, run_dir, verbose=2)
    history = run_dir_lib.read_history(run_dir)
    run_config = run_dir_lib.read_config(run_dir)
    train_seconds = sum(e.get("train_seconds", e.get("epoch_seconds", 0.0)) for e in history)
    tokens = sum(e.get("target_tokens", 0.0) for e in history)
    print(f"training: {train_seconds / 60:.1f} min, {len(history)} epochs", flush=True)

    choice = choose_on_validation(args, run_dir, run_config.get("training", run_config))
    model, source_tokenizer, target_tokenizer, _ = run_dir_lib.load_run(
        run_dir, average_last=choice["average_last"]
    )
    export_dir = export.export_translator(
        model,
        args.export_root,
        f"quality_{args.name}",
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        beam_width=args.beam,
        length_penalty_alpha=choice["length_penalty_alpha"],
    )
    scores = score_export(args, export_dir, run_dir)
    summary = {
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "preset": args.preset,
        "parameters": int(model.count_params()),
        "epochs": len(history),
        "training_minutes": round(train_seconds / 60, 1),
        "target_tokens_per_second": round(tokens / train_seconds) if train_seconds else None,
        "best_val_masked_accuracy": max(e.get("val_masked_accuracy", 0) for e in history),
        "validation_choice": choice,
        "export": str(export_dir),
        "test": scores,
        "minutes_this_call": round((time.time() - started) / 60, 1),
    }
    run_dir_lib.write_json_atomically(run_dir / "quality.json", summary, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
