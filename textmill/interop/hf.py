"""Hugging Face folders to and from textmill checkpoints, without importing transformers.

Export writes what `AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` read:
config.json, model.safetensors (fp32) and the tokenizer's files (vocab.json, merges.txt,
tokenizer_config.json and special_tokens_map.json for GPT-2 BPE; a Hugging Face tokenizer's own). The model's
family (interop/families.py: GPT-2, LLaMA, Mistral, Qwen2, GPT-NeoX, GPT-J) names its class, its config and its
tensors; a model no family holds is refused. A folder with a tokenizer.json brings it along as it is (the
model's own tokenizer, kept in the checkpoint's tokenizer/), else GPT-2's vocab.json and merges.txt. The
embedding keeps only the real vocabulary's rows on export and gets Megatron's padding back, as zero rows, on
import.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from textmill.errors import TextmillError
from textmill.io.files import atomic_folder, exported_folder
from textmill.tokenizers.gpt2 import EOD_TOKEN, padded_vocab_size
from textmill.interop.families import FAMILIES, Family, hf_family
from textmill.interop.release import checked_model, save_release
from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model
from textmill.trainer.gpt_config import GPTConfig


def block(state: dict, prefix: str) -> dict:
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


# ----------------------------------------------------------------------------------------------- export
def to_hf_state(family: Family, ours: dict, model_config: GPTConfig, vocab: int) -> dict:
    hf = {family.hf_embedding: ours["wte.weight"][:vocab], **{theirs: ours[o] for o, theirs in family.hf_globals}}
    for i in range(model_config.num_layers):
        o, h = f"blocks.{i}.", family.hf_layer.format(i)
        for a, b, transposed in family.hf_layers:
            hf[h + b] = ours[o + a].t() if transposed else ours[o + a]
        hf.update({h + k: v for k, v in family.qkv_to_hf(block(ours, o), model_config).items()})
    if not model_config.tie_embeddings:
        hf[family.hf_output] = ours["lm_head.weight"][:vocab]
    if model_config.output_bias:
        hf["lm_head.bias"] = ours["lm_head.bias"][:vocab]
    return hf


def hf_config(model_config: GPTConfig, family: Family, vocab: int, eod: int, bos: int | None = None) -> dict:
    return {"model_type": family.model_type, "architectures": [family.hf_class], **family.hf_settings(model_config),
            "vocab_size": vocab, "bos_token_id": eod if bos is None else bos, "eos_token_id": eod,
            "tie_word_embeddings": model_config.tie_embeddings, "initializer_range": model_config.init_std,
            "torch_dtype": "float32", "dtype": "float32"}


def write_tokenizer(tokenizer, max_length: int, out: Path) -> None:
    """The model's tokenizer beside it: a Hugging Face tokenizer's own files as they are, or GPT-2's two
    files with the config transformers' GPT2Tokenizer reads."""
    from textmill.tokenizers.files import folder_files
    from textmill.tokenizers.hf import HFTokenizer

    for name, path in folder_files(tokenizer).items():
        shutil.copyfile(path, out / name)
    if isinstance(tokenizer, HFTokenizer):
        return
    special = {"bos_token": EOD_TOKEN, "eos_token": EOD_TOKEN, "unk_token": EOD_TOKEN}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": max_length, "add_prefix_space": False, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


HF_EXPORT = "a Hugging Face model folder"


def export_hf(load: Path, output: Path, vocab_file=None, merge_file=None) -> dict:
    """Write the newest checkpoint under `load` as a Hugging Face model folder at `output`."""
    from safetensors.torch import save_file

    output = exported_folder(output, HF_EXPORT)  # refused before the model is read, not after
    model, ckpt = load_model(load)
    tokenizer = checkpoint_tokenizer(load, ckpt.meta, vocab_file, merge_file)
    model_config = model.config
    family = hf_family(model_config)
    ours = model.state_dict()
    vocab = ckpt.meta.get("vocab_size", tokenizer.vocab_size)  # the model's rows (a tokenizer may hold fewer)
    tensors = to_hf_state(family, ours, model_config, vocab)
    with atomic_folder(output, HF_EXPORT) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp / "model.safetensors", metadata={"format": "pt"})
        config = hf_config(model_config, family, vocab, tokenizer.eod, getattr(tokenizer, "bos", None))
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        write_tokenizer(tokenizer, model_config.max_position_embeddings, tmp)
    return {"family": family.model_type, "parameters": sum(t.numel() for t in tensors.values()), "vocab_size": vocab,
            "iteration": "release" if ckpt.release else ckpt.meta["iteration"], "output": str(output)}


# ----------------------------------------------------------------------------------------------- import
def load_safetensors(path: Path) -> dict:
    """A safetensors file's tensors, or one error line when its header lies (offsets past the end,
    overlapping or missing tensors), it is cut short, or it is not safetensors at all."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError) as exc:
        raise TextmillError(f"{path}: not a readable safetensors file ({str(exc).strip().splitlines()[-1][:200]})") from None


def read_hf_weights(folder: Path) -> dict:
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.exists():
        return load_safetensors(single)
    if index.exists():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            outside = [f for f in files if Path(f).name != f or f in ("", ".", "..")]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise TextmillError(f"{index}: not a safetensors index (a JSON object with a weight_map of file names)") from None
        if outside:  # a shard is a file beside its index, never a path elsewhere (`../outside/x.safetensors`)
            raise TextmillError(f"{index}: names {outside[0][:80]!r}, not a file of its folder")
        return {k: v for f in files for k, v in load_safetensors(folder / f).items()}
    if (folder / "pytorch_model.bin").exists():
        try:  # weights_only: a pickle that would run code is refused, never run
            return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several types for refused, truncated or foreign files
            raise TextmillError(f"{folder / 'pytorch_model.bin'}: refused or unreadable ({type(exc).__name__}: "
                                f"{str(exc).strip().splitlines()[-1][:200]})") from None
    raise TextmillError(f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def config_from_hf(hf: dict, padded_vocab: int) -> GPTConfig:
    kind = hf.get("model_type")
    if kind not in FAMILIES:
        raise TextmillError(f"model_type {kind!r} cannot be imported ({', '.join(FAMILIES)})")
    return FAMILIES[kind].config_from_hf(hf, padded_vocab)


def padded_rows(w: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.cat([w, w.new_zeros(rows - w.shape[0], *w.shape[1:])])


def from_hf_state(family: Family, hf: dict, model_config: GPTConfig) -> dict:
    ours = {"wte.weight": padded_rows(hf[family.hf_embedding], model_config.vocab_size),
            **{o: hf[theirs] for o, theirs in family.hf_globals}}
    for i in range(model_config.num_layers):
        o, h = f"blocks.{i}.", family.hf_layer.format(i)
        for a, b, transposed in family.hf_layers:
            ours[o + a] = hf[h + b].t() if transposed else hf[h + b]
        ours.update({o + k: v for k, v in family.qkv_from_hf(block(hf, h), model_config).items()})
    if not model_config.tie_embeddings:
        ours["lm_head.weight"] = padded_rows(hf[family.hf_output], model_config.vocab_size)
    if model_config.output_bias:  # padding rows get a zero bias, as they get zero weights
        ours["lm_head.bias"] = padded_rows(hf["lm_head.bias"], model_config.vocab_size)
    return ours


def import_hf(folder: Path, save: Path, divisible_by: int = 128, vocab_file=None, merge_file=None) -> dict:
    """Turn a Hugging Face folder of one of the families (interop/families.py) into a textmill `release` checkpoint
    under `save`, with its tokenizer files (from the folder, or the ones given) in `<save>/tokenizer/`."""
    from textmill.tokenizers.files import open_tokenizer
    from textmill.tokenizers.hf import is_hf_tokenizer_folder

    folder = Path(folder)
    try:
        hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TextmillError(f"{folder}/config.json: {exc}") from None
    if not isinstance(hf, dict) or not isinstance(hf.get("vocab_size"), int) or not isinstance(hf.get("model_type"), str):
        raise TextmillError(f"{folder}/config.json: not a Hugging Face model config (it needs at least model_type and "
                            "vocab_size)")
    vocab = hf["vocab_size"]
    try:
        model_config = config_from_hf(hf, padded_vocab_size(vocab, divisible_by))
    except KeyError as exc:
        raise TextmillError(f"{folder}/config.json: malformed, it has no {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise TextmillError(f"{folder}/config.json: malformed ({exc})") from None
    weights = {k: v.float() for k, v in read_hf_weights(folder).items()}
    if hf["model_type"] == "gpt2":  # OpenAI's own GPT-2 files name the tensors without "transformer."
        weights = {k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k: v for k, v in weights.items()}
    if model_config.tie_embeddings:
        weights.pop("lm_head.weight", None)
    try:
        ours = from_hf_state(FAMILIES[hf["model_type"]], weights, model_config)
    except KeyError as exc:
        raise TextmillError(f"{folder}: weights do not match config.json (KeyError: {str(exc)[:300]})") from None
    model = checked_model(model_config, ours, folder)
    if vocab_file or not is_hf_tokenizer_folder(folder):  # GPT-2's two files
        vocab_file = Path(vocab_file) if vocab_file else folder / "vocab.json"
        merge_file = Path(merge_file) if merge_file else folder / "merges.txt"
        if not vocab_file.exists() or not merge_file.exists():
            raise TextmillError(f"{folder} holds no tokenizer.json, nor vocab.json + merges.txt (GPT-2 BPE); give "
                                "--vocab-file and --merge-file")
        tokenizer = open_tokenizer(vocab_file, merge_file)
    else:  # the model's own Hugging Face tokenizer, kept as it is
        tokenizer = open_tokenizer(tokenizer_model=folder)
    save_release(save, model, tokenizer, vocab, folder)
    return {"family": hf["model_type"], "parameters": model.num_parameters(), "vocab_size": vocab,
            "padded_vocab_size": model_config.vocab_size, "output": str(save)}
