"""Small shared fixtures: tokenizers learned from a slice of the built-in corpus."""

import pytest

from keras_transformer import data
from keras_transformer.tokenizers import Tokenizer, learn_vocabulary


@pytest.fixture(scope="session")
def demo_pairs():
    return data.demo_corpus(num_pairs=600, seed=1)


@pytest.fixture(scope="session")
def demo_tokenizers(demo_pairs):
    source = learn_vocabulary(data.texts(demo_pairs, 0), vocab_size=300, lower_thresh=1)
    target = learn_vocabulary(data.texts(demo_pairs, 1), vocab_size=300, lower_thresh=1)
    return Tokenizer(source), Tokenizer(target)
