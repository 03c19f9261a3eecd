"""Text <-> token ids through a HF tokenizer and its chat template: the part of the Policy protocol every
policy with a HF tokenizer (transformers, vLLM, scripted) shares."""

from __future__ import annotations

from collections.abc import Sequence

from wrappers.policy import encodable

__all__ = ["HFTokenizerIO"]


class HFTokenizerIO:
    """Mixin implementing ``render``/``tokenize``/``decode`` with ``self.tokenizer`` (a HF tokenizer)."""

    tokenizer: object

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(encodable(text), add_special_tokens=False)["input_ids"])

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)
