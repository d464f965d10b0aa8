"""Beam search with transformers' length normalization and early stopping, and a forced
first token, against transformers' `generate()` on the imported Marian fixtures of
tests/data/marian/ (the references under their reference.json's `beam_early_stopping_*`,
`flat_beam_early_stopping_*` and `forced_first` keys, made by its make_fixtures.py
`--references-only` with transformers 5.25; this file needs neither torch nor
transformers); then the settings that choose them: a checkpoint's generation settings
(`pretrained.generation`), `export_run`'s defaults and the export command's flags.

Parity, over the 64 rows of the three fixtures together: the same hypotheses as
transformers on at least 95% of rows (n-best lists: of entries), any other a near tie
(the two normalized scores within 1e-4; both printed), and on the rows alike scores
within 1e-4 of transformers' `sequences_scores` (an [END] forced at the cap counts 0 on
both sides). The importer gives [PAD] a logit of -1e4, so the library's log-probabilities
leave out the probability transformers' log-softmax gives padding before it bans it
(`bad_words_ids`): the scores differ by that, under 3e-5 on these models. The fixtures'
models are sure of their words, so the three stopping rules part on few rows; made less
sure (`flat`: the output projection scaled by 0.25 on both sides) they part on many, and
there [PAD] gets Marian's own logit back, so that the scores agree to float error.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli
from keras_transformer.constants import END_ID, PAD_ID, START_ID
from keras_transformer.inference import export
from keras_transformer.inference.batch_decoding import BatchDecoder, DecodingOptions
from keras_transformer.inference.beam import BeamSearch
from keras_transformer.inference.sampling import GreedySearch, SamplingSearch
from keras_transformer.inference.search import without_never_emitted
from keras_transformer.pretrained.generation import decoding_settings
from keras_transformer.pretrained.safetensors_io import read_weights
from tests.helpers import assert_same_hypotheses, prefix_log_probs
from tests.test_pretrained import FIXTURES, SHAPES, Imported

RULES = {"true": True, "false": False, "never": "never"}
# The references' beam settings: OPUS-MT's generation_config.json, and the other rules.
TRANSFORMERS_BEAM = dict(
    beam_width=4, length_penalty_alpha=1.0, length_normalization="transformers"
)
# At most this share of rows (or of n-best entries) may differ, each a near tie.
NEAR_TIE_SHARE = 0.05


class Fixture:
    """An imported fixture checkpoint and its references, as the library's ids."""

    def __init__(self, name: str):
        self.imported = Imported(name)
        self.reference = self.imported.reference
        self.context = self.imported.source_ids().to_tensor()
        # transformers' max_length counts the decoder's start; its last position is
        # `</s>` (`forced_eos_token_id`), which a row limit gives.
        self.steps = self.reference["max_length"] - 1
        self.limits = tf.fill([tf.shape(self.context)[0]], self.steps)
        order = self.imported.target_order
        self.library_id = {int(m): j for j, m in enumerate(order) if j != START_ID}

    def search(self, search, **call):
        """`search` over the sources, capped as `generate` is."""
        search = search.replace(max_length=self.steps)
        model = self.imported.marian.model
        return search(model, self.context, row_limits=self.limits, **call)

    def tokens(self, rows) -> np.ndarray:
        """Marian id lists (any nesting: rows, or rows of n-best lists) as library ids,
        0-padded to the steps."""
        if rows and isinstance(rows[0][0], list):
            return np.stack([self.tokens(hypotheses) for hypotheses in rows])
        out = np.zeros((len(rows), self.steps), np.int64)
        for i, ids in enumerate(rows):
            out[i, : len(ids)] = [self.library_id[m] for m in ids]
        return out

    def marian_ids(self, tokens) -> list[int]:
        """A row of library ids as Marian ids, through its [END]."""
        tokens = list(tokens)
        return self.imported.to_marian(
            tokens[: tokens.index(END_ID) + 1 if END_ID in tokens else len(tokens)]
        )

    def forced_first(self) -> tf.Tensor:
        """The references' forced first token of each row, as library ids."""
        return tf.constant([self.library_id[m] for m in self.reference["forced_first"]["ids"]])

    def transformers_score(self, row: int, marian_ids: list[int], first_forced=False) -> float:
        """Marian ids' score under the library's model as transformers ranks them: the
        log-probabilities' sum over the length, a forced first token and an `</s>` at
        the cap counting 0."""
        log_probs = self.imported.log_probs(row, marian_ids)
        if len(marian_ids) == self.steps:
            log_probs[-1] = 0.0
        if first_forced:
            log_probs[0] = 0.0
        return sum(log_probs) / len(marian_ids)


def normalized(result) -> types.SimpleNamespace:
    """A search's result with its scores as transformers ranks them (length penalty 1)."""
    lengths = result.lengths.numpy()
    scores = result.scores.numpy() / np.maximum(lengths, 1)
    return types.SimpleNamespace(tokens=result.tokens.numpy(), lengths=lengths, scores=scores)


def theirs(fixture: Fixture, rows, scores) -> types.SimpleNamespace:
    tokens = fixture.tokens(rows)
    return types.SimpleNamespace(
        tokens=tokens, lengths=(tokens != 0).sum(-1), scores=np.asarray(scores)
    )


def assert_parity(pairs, label: str, first_forced=False) -> None:
    """Ours and transformers' hypotheses (`(fixture, ours, theirs)` a fixture, all
    fixtures together) alike but for near ties on at most `NEAR_TIE_SHARE` of rows
    (or of n-best entries); each row that differs is printed with both hypotheses'
    scores: ours under our search, theirs under transformers' and under our model."""
    for fixture, ours, reference in pairs:
        for place in np.argwhere((ours.tokens != reference.tokens).any(-1)):
            at, row = tuple(place), place[0]
            mine, other = (fixture.marian_ids(result.tokens[at]) for result in (ours, reference))
            under_ours = fixture.transformers_score(row, other, first_forced)
            print(
                f"{label}, {fixture.imported.directory.name} row {row} (entry {place.tolist()}): "
                f"ours {mine} scores {ours.scores[at]:.6f}; transformers' {other} scores "
                f"{reference.scores[at]:.6f} there and {under_ours:.6f} under our model"
            )
    ours, reference = (_together([pair[side] for pair in pairs]) for side in (1, 2))
    entries = ours.scores.size
    assert_same_hypotheses(ours, reference, max_near_ties=int(NEAR_TIE_SHARE * entries))


def _together(results) -> types.SimpleNamespace:
    """Results of several fixtures as one, their rows one after the other."""
    return types.SimpleNamespace(
        **{
            key: np.concatenate([getattr(result, key) for result in results])
            for key in ("tokens", "lengths", "scores")
        }
    )


@pytest.fixture(scope="module")
def fixtures() -> list[Fixture]:
    return [Fixture(name) for name in SHAPES]


@pytest.fixture(scope="module")
def flat_fixtures() -> list[Fixture]:
    """The fixtures made less sure as make_fixtures.py's `flattened` makes them: the
    output projection and its bias scaled (with the embeddings tied to them, which the
    library holds once), and [PAD] given Marian's logit back (see above)."""
    made = []
    for name in SHAPES:
        fixture = Fixture(name)
        reference = fixture.reference["flat_beam_early_stopping_true"]
        scale = reference["output_scale"]
        model = fixture.imported.marian.model
        paths = {v.path.split("/", 1)[1]: v for v in model.weights}
        # Where Marian ties the projection to the embeddings, the library has none of its own.
        tied = "model.decoder.embed_tokens.weight" in reference["scaled"]
        assert tied == ("final_layer/kernel" not in paths)
        scaled = ("token_embedding/embeddings", "logits_bias") if tied else ("final_layer/",)
        pad_bias = read_weights(fixture.imported.directory)["final_logits_bias"][
            0, fixture.imported.target_order[PAD_ID]
        ]
        for path, variable in paths.items():
            if any(part in path for part in scaled):
                value = variable.numpy() * scale
                if path.endswith(("logits_bias", "final_layer/bias")):
                    value[PAD_ID] = pad_bias * scale
                variable.assign(value)
        made.append(fixture)
    return made


# ------------------------------------------------------------------ parity with transformers


@pytest.mark.parametrize("rule", ["true", "false"])
def test_beam_equals_generate_with_length_normalization(fixtures, rule):
    """OPUS-MT's settings (num_beams 4, length_penalty 1.0, early_stopping true) and the
    same without early stopping: the best hypothesis of each row, and its score."""
    search = BeamSearch(**TRANSFORMERS_BEAM, early_stopping=RULES[rule])
    pairs = []
    for fixture in fixtures:
        reference = fixture.reference[f"beam_early_stopping_{rule}"]
        best = [hypotheses[0] for hypotheses in reference["nbest"]]
        scores = [hypotheses[0] for hypotheses in reference["nbest_scores"]]
        pairs.append((fixture, normalized(fixture.search(search)), theirs(fixture, best, scores)))
    assert_parity(pairs, f"early_stopping {rule}")


def assert_nbest_parity(fixtures, references: str, rule: str) -> None:
    """`num_hypotheses` 4 as transformers' `num_return_sequences` 4 (best first), with
    the stopping `rule`, against the references under key `references` + `rule`."""
    search = BeamSearch(**TRANSFORMERS_BEAM, early_stopping=RULES[rule], num_hypotheses=4)
    pairs = []
    for fixture in fixtures:
        reference = fixture.reference[references + rule]
        ours = normalized(fixture.search(search))
        pairs.append(
            (fixture, ours, theirs(fixture, reference["nbest"], reference["nbest_scores"]))
        )
    assert_parity(pairs, f"n-best, {references}{rule}")


@pytest.mark.parametrize("rule", list(RULES))
def test_nbest_lists_rank_as_generate(fixtures, rule):
    assert_nbest_parity(fixtures, "beam_early_stopping_", rule)


def test_the_less_sure_references_part_by_stopping_rule(fixtures):
    """On the less sure models the stopping rules lead transformers to other n-best lists
    on many rows: the next test checks three searches, not one three times."""

    def parted(a: str, b: str) -> int:
        lists = [
            [f.reference[f"flat_beam_early_stopping_{rule}"]["nbest"] for f in fixtures]
            for rule in (a, b)
        ]
        return sum(x != y for ours, other in zip(*lists) for x, y in zip(ours, other))

    assert parted("true", "false") >= 5
    assert parted("false", "never") >= 20


@pytest.mark.parametrize("rule", list(RULES))
def test_stopping_rules_equal_generate_on_less_sure_models(flat_fixtures, rule):
    assert_nbest_parity(flat_fixtures, "flat_beam_early_stopping_", rule)


def test_a_forced_first_token_greedy_equals_generate(fixtures):
    """transformers' `forced_bos_token_id`, an ordinary target id a row: greedy outputs
    are token-identical, the choices after the forced token being at least 2e-4 apart
    (twice the logits' tolerance against transformers')."""
    for fixture in fixtures:
        result = fixture.search(
            GreedySearch(return_logits=True), forced_first=fixture.forced_first()
        )
        assert fixture.imported.generated(result) == fixture.reference["forced_first"]["greedy"]
        logits = result.logits.numpy()
        chosen = without_never_emitted(tf.reshape(logits, [-1, logits.shape[-1]])).numpy()
        top_two = np.sort(chosen.reshape(logits.shape), -1)[..., -2:]
        for row, length in enumerate(result.lengths.numpy()):
            chose = slice(1, min(length, fixture.steps - 1))  # not the forced tokens
            margins = top_two[row, chose, 1] - top_two[row, chose, 0]
            assert margins.min() >= 2e-4, (fixture.imported.directory.name, row)


def test_a_forced_first_token_beam_equals_generate(fixtures):
    """Beam 4 as OPUS-MT's settings with `forced_bos_token_id`: the forced token counts
    0 in the score (transformers masks every other token after the log-softmax)."""
    search = BeamSearch(**TRANSFORMERS_BEAM, early_stopping=True)
    pairs = []
    for fixture in fixtures:
        reference = fixture.reference["forced_first"]
        ours = normalized(fixture.search(search, forced_first=fixture.forced_first()))
        pairs.append((fixture, ours, theirs(fixture, reference["beam"], reference["beam_scores"])))
    assert_parity(pairs, "forced first token", first_forced=True)


# ------------------------------------------------------------ the searches' other paths


def _beam(**settings) -> BeamSearch:
    return BeamSearch(**TRANSFORMERS_BEAM, early_stopping=True, **settings)


SEARCHES = {
    "greedy": GreedySearch(),
    "sample": SamplingSearch(seed=3, top_k=5),
    "beam_gnmt": BeamSearch(beam_width=3, length_penalty_alpha=0.6),
    "beam_transformers": _beam(),
}


@pytest.mark.parametrize("kind", list(SEARCHES))
def test_a_forced_first_token_starts_its_row_and_counts_zero(fixtures, kind):
    """Rows given a forced first token start with it and score the rest of their tokens
    alone (the forced one's log-probability is 0); rows given 0 decode as without one."""
    fixture = fixtures[1]
    first = fixture.forced_first().numpy()
    first[::2] = 0
    forced = fixture.search(SEARCHES[kind], forced_first=first)
    plain = fixture.search(SEARCHES[kind])
    on = first > 0
    tokens, lengths = forced.tokens.numpy(), forced.lengths.numpy()
    np.testing.assert_array_equal(tokens[on, 0], first[on])
    unforced = [
        types.SimpleNamespace(
            tokens=r.tokens.numpy()[~on],
            lengths=r.lengths.numpy()[~on],
            scores=r.scores.numpy()[~on],
        )
        for r in (forced, plain)
    ]
    assert_same_hypotheses(*unforced, max_near_ties=1)
    # The model's log-probabilities of each row's tokens (an [END] a row limit forces
    # counts 0 in transformers' beam search: only rows that end before the cap here).
    model = fixture.imported.marian.model
    cumulative = prefix_log_probs(model, fixture.context.numpy(), tokens)
    first_log_prob = cumulative[:, 0]
    expected = cumulative[np.arange(len(tokens)), lengths - 1] - np.where(on, first_log_prob, 0.0)
    before_cap = lengths < fixture.steps
    np.testing.assert_allclose(forced.scores.numpy()[before_cap], expected[before_cap], atol=1e-4)


def test_a_forced_first_token_comes_before_the_prefix(fixtures):
    """With a target prefix too, a row's forced token comes first and its prefix after it."""
    fixture = fixtures[1]
    ordinary = fixture.forced_first().numpy()
    first = ordinary.copy()
    first[0] = 0
    prefix = np.stack([np.roll(ordinary, 1), np.roll(ordinary, 2)], axis=1)
    prefix[1, 1] = 0  # a prefix of one token
    for search in (GreedySearch(), _beam()):
        tokens = fixture.search(search, forced_first=first, prefix=prefix).tokens.numpy()
        np.testing.assert_array_equal(tokens[0, :2], prefix[0])
        np.testing.assert_array_equal(tokens[1, :2], [first[1], prefix[1, 0]])
        np.testing.assert_array_equal(tokens[2:, 0], first[2:])
        np.testing.assert_array_equal(tokens[2:, 1:3], prefix[2:])


def test_loop_forms_and_fixed_shapes_search_alike_in_transformers_mode(fixtures):
    """The loop over the rows still searching (many hypotheses), the loop over all (few)
    and the fixed-shape loop (XLA's) give the same hypotheses."""
    fixture = fixtures[2]
    search = _beam(num_hypotheses=2)
    first = fixture.forced_first()
    every = normalized(fixture.search(search, forced_first=first))  # 80 hypotheses
    fixed = normalized(fixture.search(search.replace(fixed_shapes=True), forced_first=first))
    assert_same_hypotheses(every, fixed, max_near_ties=1)
    alone = search.replace(
        max_length=fixture.steps
    )(
        fixture.imported.marian.model,
        fixture.context[:3],  # 12 hypotheses
        row_limits=fixture.limits[:3],
        forced_first=first[:3],
    )
    part = types.SimpleNamespace(**{k: v[:3] for k, v in vars(every).items()})
    assert_same_hypotheses(part, normalized(alone), max_near_ties=1)


@pytest.fixture(scope="module")
def short_sources(fixtures):
    """The separate_gelu fixture's sources of at most 16 tokens (one compiled shape)."""
    fixture = fixtures[1]
    ids = fixture.imported.source_ids()
    keep = np.flatnonzero(ids.row_lengths().numpy() <= 16)
    return fixture, tf.gather(ids, keep), tf.gather(fixture.forced_first(), keep)


def test_the_batch_decoder_takes_forced_first_tokens_in_sub_batches_and_compiled(short_sources):
    """`BatchDecoder.decode` hands each sub-batch its rows' forced tokens (in its own
    order) and so does XLA's compiled search; transformers' rules alike."""
    fixture, ids, first = short_sources
    model = fixture.imported.marian.model
    options = DecodingOptions(
        max_length=8, max_length_a=None, length_normalization="transformers", early_stopping=True
    )
    whole = BatchDecoder(model, dataclasses.replace(options, sub_batch_size=1000, in_flight=1))
    parts = BatchDecoder(model, dataclasses.replace(options, sub_batch_size=4))
    compiled = BatchDecoder(model, dataclasses.replace(options, jit_compile=True))
    for beam_width in (None, 4):
        results = [
            normalized(decoder.decode(ids, beam_width=beam_width, forced_first=first))
            for decoder in (whole, parts, compiled)
        ]
        np.testing.assert_array_equal(results[0].tokens[:, 0], first.numpy())
        for other in results[1:]:
            assert_same_hypotheses(results[0], other, max_near_ties=1)


def test_rows_at_max_length_end_with_end_in_transformers_mode(fixtures):
    """With transformers' rules a row that reaches `max_length` ends with [END] there (as
    transformers' `forced_eos_token_id` ends it), also without a source-relative cap;
    with GNMT's, it stops there as it is."""
    fixture = fixtures[2]
    ids = fixture.imported.source_ids()
    options = DecodingOptions(max_length=5, max_length_a=None)
    for normalization in ("transformers", "gnmt"):
        decoder = BatchDecoder(
            fixture.imported.marian.model,
            dataclasses.replace(options, length_normalization=normalization),
        )
        for beam_width in (None, 4):
            result = decoder.decode(ids, beam_width=beam_width)
            tokens, lengths = result.tokens.numpy(), result.lengths.numpy()
            at_cap = lengths == 5
            assert at_cap.sum() >= 5
            ends = tokens[at_cap, 4] == END_ID
            assert ends.all() if normalization == "transformers" else not ends.all()


@pytest.mark.parametrize(
    "settings, name",
    [
        (dict(length_normalization="fairseq"), "length_normalization"),
        (dict(early_stopping="sometimes"), "early_stopping"),
        (dict(early_stopping=1), "early_stopping"),
        (dict(length_penalty_alpha=-0.5), "length_penalty_alpha"),
        (
            dict(length_normalization="transformers", length_penalty_alpha=math.nan),
            "length_penalty_alpha",
        ),
    ],
)
def test_bad_beam_settings_are_refused_by_name(settings, name):
    for make in (BeamSearch, DecodingOptions):
        with pytest.raises(ValueError, match=name):
            make(**settings)


def test_transformers_length_penalty_may_be_negative():
    """transformers' `length_penalty` < 0 favours short hypotheses; GNMT's must be >= 0
    for its stopping bound."""
    for make in (BeamSearch, DecodingOptions):
        made = make(length_normalization="transformers", length_penalty_alpha=-1.0)
        assert made.length_penalty_alpha == -1.0


# ---------------------------------------------------- a checkpoint's generation settings


SETTING_NAMES = (
    "beam_width",
    "max_length",
    "length_penalty_alpha",
    "length_normalization",
    "early_stopping",
    "max_length_a",
    "end_at_max_length",
)


def _checkpoint(directory, **files) -> str:
    directory.mkdir(exist_ok=True)
    for name, content in files.items():
        (directory / f"{name}.json").write_text(json.dumps(content))
    return directory


def test_decoding_settings_of_a_checkpoint():
    settings = decoding_settings(FIXTURES / "joint_relu")
    assert settings == {
        "beam_width": 4,
        "max_length": 23,  # generation_config.json's 24 counts the decoder's start
        "length_penalty_alpha": 0.0,
        "length_normalization": "transformers",
        "early_stopping": False,
        "max_length_a": None,
        "end_at_max_length": True,  # forced_eos_token_id 0, Marian's </s>
        "checkpoint_ids": {
            "decoder_start_token_id": 289,
            "forced_bos_token_id": None,
            "forced_eos_token_id": 0,
            "bad_words_ids": [[289]],
            "no_repeat_ngram_size": 0,
            "eos_token_id": 0,
            "pad_token_id": 289,
        },
        "unsupported": {},
        "source": "generation_config.json",
    }
    # What a translator takes.
    DecodingOptions(**{name: settings[name] for name in SETTING_NAMES})


def test_decoding_settings_fall_back_to_config_json_then_transformers_defaults(tmp_path):
    """Without generation_config.json, config.json's generation keys; what neither sets
    (or sets to null), transformers' defaults."""
    opus = dict(num_beams=6, max_length=512, eos_token_id=0, forced_eos_token_id=0)
    legacy = decoding_settings(
        _checkpoint(tmp_path / "legacy", config=opus | {"length_penalty": None})
    )
    assert legacy["source"] == "config.json"
    assert (legacy["beam_width"], legacy["max_length"], legacy["length_penalty_alpha"]) == (
        6,
        511,
        1.0,
    )
    assert legacy["unsupported"] == {}
    bare = decoding_settings(_checkpoint(tmp_path / "bare"))
    assert bare["source"] is None
    assert "beam_width" not in bare  # transformers' greedy default: the library's width
    assert [bare[name] for name in SETTING_NAMES[1:]] == [
        19,
        1.0,
        "transformers",
        False,
        None,
        False,  # no forced_eos_token_id: a row ends at max_length as it is
    ]
    assert bare["unsupported"] == {}
    other_end = decoding_settings(
        _checkpoint(tmp_path / "other", config=dict(eos_token_id=2, forced_eos_token_id=5))
    )
    assert other_end["unsupported"] == {"forced_eos_token_id": 5}
    given = decoding_settings(
        _checkpoint(
            tmp_path / "given",
            generation_config=dict(
                max_new_tokens=50, early_stopping="never", forced_bos_token_id=7
            ),
            config=dict(decoder_start_token_id=2, eos_token_id=2, forced_eos_token_id=2),
        )
    )
    assert (given["max_length"], given["early_stopping"]) == (50, "never")
    ids = given["checkpoint_ids"]
    assert (ids["forced_bos_token_id"], ids["decoder_start_token_id"], ids["eos_token_id"]) == (
        7,
        2,
        2,
    )


def test_settings_the_searches_cannot_honour_are_reported(tmp_path):
    unhonoured = dict(
        do_sample=True,
        num_beam_groups=2,
        diversity_penalty=0.5,
        repetition_penalty=1.2,
        no_repeat_ngram_size=3,
        bad_words_ids=[[5], [6, 7]],
        forced_eos_token_id=4,
    )
    base = dict(eos_token_id=2, pad_token_id=1, num_beams=4)
    directory = _checkpoint(tmp_path, generation_config=base | unhonoured)
    assert decoding_settings(directory)["unsupported"] == unhonoured


@pytest.mark.parametrize(
    "generation_config, name",
    [
        (dict(early_stopping="maybe"), "early_stopping"),
        (dict(max_length=1), "max_length"),
        (dict(num_beams=0), "num_beams"),
        ([], "JSON object"),
    ],
)
def test_settings_the_searches_cannot_take_are_refused(tmp_path, generation_config, name):
    directory = _checkpoint(tmp_path, generation_config=generation_config)
    with pytest.raises(ValueError, match=f"generation_config.json.*{name}"):
        decoding_settings(directory)


def test_export_run_decodes_with_the_run_s_generation_settings(monkeypatch, tmp_path):
    """An imported run's "generation" gives the export's decoding settings but those the
    caller gives (None: not given, but for max_length_a); a run trained here gets none."""
    generation = decoding_settings(FIXTURES / "joint_relu") | dict(
        early_stopping=True, length_penalty_alpha=1.0
    )
    config = {"generation": generation, "training": {"max_tokens": 64}}
    calls = []
    monkeypatch.setattr(export, "load_run", lambda run_dir, average_last: (1, 2, 3, config))
    monkeypatch.setattr(
        export, "export_translator", lambda *args, **kwargs: calls.append((args, kwargs))
    )
    export.export_run(tmp_path, tmp_path, "imported")
    args, kwargs = calls[-1]
    assert args == (1, tmp_path, "imported", None)
    assert {name: kwargs[name] for name in SETTING_NAMES} == {
        name: generation[name] for name in SETTING_NAMES
    }
    export.export_run(
        tmp_path, tmp_path, "imported", beam_width=2, max_length=None, max_length_a=1.5
    )
    kwargs = calls[-1][1]
    assert (kwargs["beam_width"], kwargs["max_length"], kwargs["max_length_a"]) == (
        2,
        23,
        1.5,
    )
    del config["generation"]
    export.export_run(tmp_path, tmp_path, "trained", beam_width=3)
    assert calls[-1][1].keys() & set(SETTING_NAMES) == {"beam_width"}


def test_export_flags_reach_export_run_only_when_given(monkeypatch, tmp_path):
    from keras_transformer.cli import export as export_command

    calls = []
    monkeypatch.setattr(
        export_command, "export_run", lambda *args, **kwargs: calls.append(kwargs) or tmp_path
    )
    argv = ["export", str(tmp_path), "--name", "imported"]
    assert cli.main(argv) == 0
    assert not calls[-1].keys() & set(SETTING_NAMES)
    flags = ["--length-normalization", "transformers", "--early-stopping", "never"]
    flags += ["--length-penalty", "-0.5", "--beam-width", "5", "--max-length-a", "2"]
    assert cli.main(argv + flags) == 0
    assert {name: calls[-1][name] for name in SETTING_NAMES if name in calls[-1]} == {
        "length_normalization": "transformers",
        "early_stopping": "never",
        "length_penalty_alpha": -0.5,
        "beam_width": 5,
        "max_length_a": 2.0,
    }
    for value, expected in (("TRUE", True), ("false", False)):
        cli.main(argv + ["--early-stopping", value])
        assert calls[-1]["early_stopping"] is expected
    with pytest.raises(SystemExit):
        cli.main(argv + ["--early-stopping", "sometimes"])
