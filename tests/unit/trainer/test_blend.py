"""Blending several datasets as megatron-core does."""

import numpy as np
import pytest

from textmill.errors import TextmillError
from textmill.trainer.blend import blending_indices, parse_data_path, samples_per_dataset


def test_blending_matches_megatron_core():
    from megatron.core.datasets import helpers_cpp

    assert parse_data_path(["30", "a", "70", "b"]) == (["a", "b"], [0.3, 0.7])
    assert parse_data_path(["a", "b", "c"]) == (["a", "b", "c"], [1 / 3] * 3)
    assert parse_data_path(["x", "a", "y", "b"])[0] == ["x", "a", "y", "b"]
    with pytest.raises(TextmillError, match="non-negative"):
        parse_data_path(["-1", "a", "2", "b"])
    assert samples_per_dataset([0.3, 0.7], 1000) == [302, 704]
    for weights in ([0.3, 0.7], parse_data_path(["1", "a", "2", "b", "3.5", "c", "0.25", "d"])[1], [1.0]):
        n = 20_000
        dataset_index, sample_index = np.zeros(n, np.int16), np.zeros(n, np.int64)
        helpers_cpp.build_blending_indices(dataset_index, sample_index, np.array(weights), len(weights), n, False)
        ours = blending_indices(weights, n)
        assert np.array_equal(ours[0], dataset_index) and np.array_equal(ours[1], sample_index)
