"""A damaged sample-index cache is reported and built again."""


def test_a_damaged_sample_index_cache_is_reported_and_built_again(corpus, tmp_path, capsys):
    import shutil

    import numpy as np

    from textmill.trainer.data import DataConfig, build_splits

    for suffix in (".bin", ".idx"):
        shutil.copyfile(f"{corpus['prefix']}{suffix}", tmp_path / f"owt{suffix}")
    cfg = DataConfig([str(tmp_path / "owt")], split="90,10,0", seq_len=32)
    first = build_splits(cfg, [64, 8, 0])[0]
    expected = np.array(first[5])
    [sample_index] = (tmp_path / "index-cache").glob("*-train-sample_idx.npy")
    cut = sample_index.read_bytes()
    sample_index.write_bytes(cut[: len(cut) // 2])
    again = build_splits(cfg, [64, 8, 0])[0]
    assert np.array_equal(np.array(again[5]), expected)
    err = capsys.readouterr().err
    assert "is damaged" in err and err.rstrip().endswith("the sample index is built again")


def test_a_split_is_up_to_three_decimal_numbers_and_anything_else_is_one_error():
    """Issue 62: `--split "1..2,3,4"` and `".,.,."` ended in a traceback (float() of the pattern's pieces), and
    `1e3,1` was read as three numbers."""
    import pytest

    from textmill.errors import TextmillError
    from textmill.trainer.data import parse_split

    def ends(split: str) -> list[float]:
        return [hi for _, hi in parse_split(split)]

    assert ends("969,30,1") == pytest.approx([.969, .999, 1])
    assert ends("98/2") == pytest.approx([.98, 1, 1])  # Megatron's other separator
    assert ends(" .5, .5") == pytest.approx([.5, 1, 1])
    for bad in ("1..2,3,4", ".,.,.", "1e3,1", "1,2,3,4", "", "0,0,0", "-1,2", "１,2"):
        with pytest.raises(TextmillError, match="--split must be up to three non-negative numbers"):
            parse_split(bad)
