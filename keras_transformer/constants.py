"""The reserved tokens and their ids: the one place every module reads them from.

Every vocabulary starts with these four tokens in this order, so their ids are
the same for every tokenizer, and id 0 is the padding every mask assumes.
"""

PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
RESERVED_TOKENS = [PAD, UNK, START, END]
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
