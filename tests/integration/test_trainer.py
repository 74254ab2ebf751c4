"""`textmill train`: bad input (a damaged checkpoint included) is one error line; --compile falls back to eager where
inductor cannot run."""

from support.cli import run_cli
from support.training import train_config


def test_bad_input_is_one_clear_error(corpus, tmp_path):
    base = ["train", "--vocab-file", str(corpus["vocab"]), "--train-iters", "2", "--seq-length", "32"]
    cases = [
        (["--data-path", str(tmp_path / "missing")], "indexed dataset file not found"),
        (["--data-path", str(corpus["prefix"]), "--seq-length", "512"], "longer than --max-position-embeddings 256"),
        (["--data-path", str(corpus["prefix"]), "--global-batch-size", "6", "--micro-batch-size", "4"], "not divisible"),
    ]
    small_vocab = ["train", "--vocab-size", "300", "--train-iters", "2", "--seq-length", "32",
                   "--data-path", str(corpus["prefix"])]
    for args, message in cases:
        r = run_cli(*base, *args)
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run_cli(*small_vocab)
    assert r.returncode == 2 and "does not fit the 300-token vocabulary" in r.stderr

    save = tmp_path / "ck"
    r = run_cli(*base, "--data-path", str(corpus["prefix"]), "--save", str(save), "--eval-iters", "1")
    assert r.returncode == 0, r.stderr
    state = save / "iter_0000002" / "mp_rank_00" / "model_optim_rng.pt"
    data = bytearray(state.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 50):  # 50 bytes of the weights flipped, size unchanged
        data[i] ^= 0xFF
    state.write_bytes(bytes(data))
    resume = [*base, "--data-path", str(corpus["prefix"]), "--load", str(save), "--save", str(save), "--train-iters", "4"]
    r = run_cli(*resume)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"textmill: error: {state}: damaged, its sha256 differs from the one recorded when it was written; load an "
        "earlier checkpoint (point latest_checkpointed_iteration.txt at it) or another copy"], r.stderr
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "2\n" and not (save / "iter_0000004").exists()
    state.write_bytes(bytes(data[:1000]))
    r = run_cli(*resume)
    assert r.returncode == 2 and "damaged, 1000 bytes where" in r.stderr, r.stderr
    (save / "latest_checkpointed_iteration.txt").write_text("7\n")
    r = run_cli(*base, "--data-path", str(corpus["prefix"]), "--load", str(save), "--train-iters", "4")
    assert r.returncode == 2 and "iter_0000007" in r.stderr and "holds no checkpoint" in r.stderr


def test_compile_falls_back_to_eager_with_one_warning_where_inductor_cannot_run(corpus, tmp_path, monkeypatch):

    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # a machine without a C compiler
    options = train_config(corpus, train_iters=2, eval_interval=2, compile=True, save=tmp_path / "ckpt").to_argv()
    r = run_cli("train", *options, "--device", "cpu")
    assert r.returncode == 0, r.stderr[-2000:]
    warnings = [line for line in r.stdout.splitlines() if "warning: --compile" in line]
    assert warnings == ["textmill train: warning: --compile: inductor needs a C compiler on a CPU and none was found; "
                        "training without compilation"]
    assert "train: 2 iterations" in r.stdout
