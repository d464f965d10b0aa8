"""benchmarks/ended_rows.py counts row-steps as the searches run them."""

import tensorflow as tf

from benchmarks.ended_rows import live_share


class _Words:
    """A stand-in for a SentencePiece model: one piece a word."""

    def encode(self, text):
        return text.split()


def test_counts_live_row_steps_per_search_of_the_two_way_split():
    # Sources of 3, 4, 5 and 6 ids with [START] and [END]: two searches of two rows
    # (the split by work), which need 2 and 4, then 3 and 3 steps ([END] included).
    sources = ["a", "a b", "a b c", "a b c d"]
    outputs = {"a": "x", "a b": "x y z", "a b c": "x y", "a b c d": "x y"}

    def translate(text):
        return {"translation": tf.constant([outputs[t.decode()] for t in text.numpy()])}

    assert live_share(translate, sources, _Words(), batch=4) == (2 + 4 + 3 + 3, 2 * 4 + 2 * 3)
    # One sentence a call: no row waits for another.
    assert live_share(translate, sources, _Words(), batch=1) == (12, 12)
