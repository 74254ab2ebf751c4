"""Megatron's own flag lines train through `textmill train`, and Weights & Biases logs with Megatron's flags."""

from support.cli import run_cli

# The flags of Megatron-LM's examples/pretrain_gpt.sh and examples/pretrain_gpt3_175B.sh (NVIDIA/Megatron-LM,
# the versions with --data-impl and --checkpoint-activations), sized down: the same flags, small numbers.
PRETRAIN_GPT_SH = """--num-layers 2 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 4 --global-batch-size 8
    --seq-length 64 --max-position-embeddings 64 --train-iters 6 --lr-decay-iters 4 --save {save} --load {save}
    --data-path {data} --vocab-file {vocab} --merge-file {merges} --data-impl mmap --split 949,50,1
    --distributed-backend nccl --lr 0.00015 --min-lr 1.0e-5 --lr-decay-style cosine --weight-decay 1e-2
    --clip-grad 1.0 --lr-warmup-fraction .01 --checkpoint-activations --log-interval 2 --save-interval 3
    --eval-interval 3 --eval-iters 1 --fp16"""


def test_megatrons_pretrain_gpt_sh_line_trains_on_a_cpu(corpus, tmp_path):

    line = PRETRAIN_GPT_SH.format(save=tmp_path / "ckpt", data=corpus["prefix"], vocab=corpus["vocab"],
                                  merges=corpus["merges"]).split()
    r = run_cli("train", *[flag for flag in line if flag != "--fp16"], "--device", "cpu")  # fp16 needs a GPU
    assert r.returncode == 0, r.stderr[-2000:]
    assert "train: 6 iterations" in r.stdout and (tmp_path / "ckpt" / "iter_0000006").is_dir()


def test_weights_and_biases_logging_with_megatrons_flags_in_offline_mode(corpus, tmp_path, monkeypatch):

    monkeypatch.setenv("WANDB_MODE", "offline")  # nothing leaves the machine; the run stays in its folder
    monkeypatch.setenv("WANDB_SILENT", "true")
    r = run_cli("train", "--data-path", str(corpus["prefix"]), "--vocab-file", str(corpus["vocab"]), "--merge-file",
                str(corpus["merges"]), "--seq-length", "64", "--micro-batch-size", "2", "--global-batch-size", "2",
                "--train-iters", "4", "--log-interval", "2", "--eval-interval", "2", "--eval-iters", "1",
                "--save", str(tmp_path / "ckpt"), "--wandb-project", "textmill-test", "--wandb-exp-name", "tiny",
                "--wandb-save-dir", str(tmp_path / "wandb"), "--device", "cpu")
    assert r.returncode == 0, r.stderr[-2000:]
    [run] = (tmp_path / "wandb" / "wandb").glob("offline-run-*/run-*.wandb")
    logged = run.read_bytes()  # wandb's record log: the metric names, the project and the settings are in it
    for name in (b"train/lm_loss", b"train/lr", b"train/tokens_per_s", b"valid/lm_loss", b"textmill-test", b"tiny"):
        assert name in logged, name
