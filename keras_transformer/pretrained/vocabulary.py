"""A checkpoint's vocabulary in the library's id order, shared by every importer.

The library's masks are built from id 0, and its reserved ids are [PAD] 0, [UNK] 1,
[START] 2, [END] 3. A checkpoint puts its pad, unknown, decoder-start and end-of-sentence
tokens elsewhere (Marian: `</s>` 0, `<pad>` last; fairseq's models: `<s>` 0, `<pad>` 1,
`</s>` 2, `<unk>` 3). So each vocabulary is reordered: library id i is the checkpoint's
id order[i], with pad, unk, the decoder's start and eos first and every other id after
them in the checkpoint's order. One more row than the checkpoint's: [START] repeats the
start id's row, so that the decoder's first step computes what the checkpoint's does.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_transformer.constants import PAD_ID, START_ID

# The name of the [START] row in an imported vocabulary: never a piece of text.
START_PIECE = "[START]"


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """One side's vocabulary: the checkpoint's pieces by id, and the library's order."""

    pieces: list[str]  # checkpoint id -> piece
    order: np.ndarray  # library id -> checkpoint id (one more than the checkpoint's: [START])

    @classmethod
    def reordered(cls, pieces: list[str], pad: int, unk: int, start: int, eos: int):
        """`pieces` with the library's order: pad, unk, start, eos, then the rest."""
        special = {pad, unk, eos}
        rest = (i for i in range(len(pieces)) if i not in special)
        order = np.array([pad, unk, start, eos, *rest])
        assert order[PAD_ID] == pad
        return cls(list(pieces), order)

    def library_pieces(self) -> list[str]:
        """The pieces in library id order, [START] named `START_PIECE`."""
        pieces = [self.pieces[i] for i in self.order]
        pieces[START_ID] = START_PIECE
        return pieces

    def library_id(self, checkpoint_id: int) -> int:
        """The library's id of a checkpoint id (its first: the start's row repeats)."""
        matches = np.flatnonzero(self.order == checkpoint_id)
        return int(matches[matches != START_ID][0]) if len(matches) > 1 else int(matches[0])
