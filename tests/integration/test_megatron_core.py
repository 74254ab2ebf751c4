"""Megatron-core's own processes, one gloo process per rank, against textmill's Megatron files: its GPTModel loads
textmill's exports strictly in both of Megatron-LM's formats and gives textmill's logits; a torch_dist checkpoint
its own saver wrote imports tensor for tensor; hostile or damaged torch_dist metadata and shards are one error line.
(Moved from the unit lane, whose tests start no processes: these took a minute and a half of it.)"""

import io
import pickle
import re
import shutil

import pytest
import torch

from support.files import TEST_DATA
from support.megatron_files import RunsCode, hf_gpt2, load_with_megatron_core, write_megatron, write_megatron_dist
from textmill.errors import TextmillError
from textmill.interop.megatron import import_megatron
from textmill.trainer.checkpoint import load_model
from textmill.trainer.dcp_metadata import SafeMetadataUnpickler

pytest.importorskip("transformers")
VOCAB, MERGES = TEST_DATA / "gpt2-vocab.json", TEST_DATA / "gpt2-merges.txt"


@pytest.mark.parametrize("fmt, tp, pp", [("torch", 1, 1), ("torch", 2, 1), ("torch", 2, 2),
                                         ("torch_dist", 1, 1), ("torch_dist", 2, 1), ("torch_dist", 2, 2)])
def test_megatron_core_loads_the_export_strictly_with_the_same_logits(tmp_path, fmt, tp, pp):
    """Megatron-core's own GPTModel, one gloo process per rank (tests/support/megatron_core_loader.py), built from
    the exported args, loads the export strictly (torch: each rank's file; torch_dist: the one whole export, cut
    by dist_checkpointing.load for the layout, the vocabulary padded for it), then holds exactly textmill's
    tensors and gives textmill's logits; the legacy names (for an old Megatron-LM) import back to the same model."""
    from textmill.interop.megatron_export import export_megatron

    write_megatron(tmp_path / "megatron", hf_gpt2(), 3.0)
    import_megatron(tmp_path / "megatron", tmp_path / "ckpt", VOCAB, MERGES)
    model = load_model(tmp_path / "ckpt")[0].eval()
    original = model.state_dict()
    r = export_megatron(tmp_path / "ckpt", tmp_path / "core", *((tp, pp) if fmt == "torch" else (1, 1)), fmt=fmt)
    assert (r["names"], r["format"]) == ("core", fmt)
    held, logits = load_with_megatron_core(tmp_path / "core" / "release", tp, pp, tmp_path / "loaded")
    for name, tensor in original.items():
        rows = min(tensor.shape[0], held[name].shape[0])  # the vocabulary is padded for each layout
        assert torch.equal(held[name][:rows], tensor[:rows]), name
    if pp > 1:  # the last stage's output layer is the tied word embedding, loaded from the first stage's
        for t in range(tp):
            last = torch.load(tmp_path / "loaded" / f"expected_tp{t}_pp{pp - 1}.pt", weights_only=True)
            first = torch.load(tmp_path / "loaded" / f"expected_tp{t}_pp0.pt", weights_only=True)
            assert torch.equal(last["output_layer.weight"], first["embedding.word_embeddings.weight"])
    else:
        with torch.no_grad():
            ours = model(logits["tokens"])[..., :logits["logits"].shape[-1]]
        assert (ours - logits["logits"]).abs().max().item() < 1e-5
    if fmt == "torch":
        export_megatron(tmp_path / "ckpt", tmp_path / "legacy", tp, pp, names="legacy", fmt="torch")
    for names in ("core",) + (("legacy",) if fmt == "torch" else ()):
        import_megatron(tmp_path / names, tmp_path / f"back-{names}", VOCAB, MERGES)
        back = load_model(tmp_path / f"back-{names}")[0].state_dict()
        assert all(torch.equal(back[name][: t.shape[0]], t[: back[name].shape[0]]) for name, t in original.items())


@pytest.fixture(scope="module")
def megatron_dist(tmp_path_factory):
    """A torch_dist checkpoint (Megatron-LM's default format) Megatron-core wrote, and the model it holds."""
    out = tmp_path_factory.mktemp("torch_dist") / "megatron"
    return out, write_megatron_dist(out)


def test_a_torch_dist_checkpoint_megatron_core_wrote_imports_tensor_for_tensor(megatron_dist, tmp_path):
    """Megatron-core's own saver wrote it (tests/support/megatron_dist_writer.py): the decoder's layers stacked
    on one axis, the norms under the fused names, the random state a bytes entry that is never read."""
    folder, whole = megatron_dist
    r = import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)
    assert (r["format"], r["tensor_parallel"], r["pipeline_parallel"], r["iteration"]) == ("torch_dist", 1, 1, 5)
    ours = load_model(tmp_path / "ckpt")[0].state_dict()
    assert sorted(ours) == sorted(whole)
    for name, tensor in whole.items():
        assert torch.equal(ours[name], tensor.float()), name


def test_torch_dist_metadata_that_would_run_code_is_refused(megatron_dist, tmp_path, monkeypatch):
    import pickle
    import shutil

    monkeypatch.chdir(tmp_path)
    folder = shutil.copytree(megatron_dist[0], tmp_path / "megatron")
    iteration = folder / "iter_0000005"
    (iteration / ".metadata").write_bytes(pickle.dumps(RunsCode()))
    with pytest.raises(TextmillError, match=r"\.metadata: refused, not checkpoint metadata textmill can trust"):
        import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)
    (iteration / "metadata.json").write_text('{"sharded_backend": "zarr"}')
    with pytest.raises(TextmillError, match="not one in Megatron-LM's torch_dist format .* sharded_backend 'zarr'"):
        import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)
    assert not (tmp_path / "ran-code").exists() and not (tmp_path / "ckpt").exists()


def set_size(size):
    def change(metadata):
        entry = metadata.state_dict_metadata["embedding.word_embeddings.weight"]
        entry.size = torch.Size(size)
        for chunk in entry.chunks:
            chunk.sizes = torch.Size(size)
    return change


DIST_CASES = {
    "a size of 10^15 elements": (set_size([10**9, 10**6]), "more than its .distcp files hold"),
    "a size larger than memory, smaller than a Python int": (set_size([2**40, 64]), "more than its .distcp files hold"),
    "a negative size": (set_size([-5, 64]), "a negative size"),
}


@pytest.mark.parametrize("case", sorted(DIST_CASES) + ["a .distcp cut to a third"])
def test_a_hostile_torch_dist_checkpoint_is_one_error_line(case, megatron_dist, tmp_path):
    folder = shutil.copytree(megatron_dist[0], tmp_path / "megatron")
    iteration = folder / "iter_0000005"
    if case in DIST_CASES:
        change, message = DIST_CASES[case]
        metadata = SafeMetadataUnpickler(io.BytesIO((iteration / ".metadata").read_bytes()), foreign=True).load()
        change(metadata)
        (iteration / ".metadata").write_bytes(pickle.dumps(metadata))
    else:
        shard = max(iteration.glob("*.distcp"), key=lambda p: p.stat().st_size)
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 3])
        message = "cut short (.metadata places"
    with pytest.raises(TextmillError, match=re.escape(message)):
        import_megatron(folder, tmp_path / "ckpt", VOCAB, MERGES)
    assert not (tmp_path / "ckpt").exists()
