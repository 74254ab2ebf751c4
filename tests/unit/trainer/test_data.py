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
