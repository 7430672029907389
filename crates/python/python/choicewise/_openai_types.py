"""choicewise's results in openai's types, for when openai is installed (``_compat`` imports
this module only then).

``usage()`` gives a :class:`Usage`: openai's ``CompletionUsage`` (what ``collect().usage``
is) with choicewise's own fields declared: ``source`` (``"reported"``: the provider's
figures; ``"estimated"``: counted with tiktoken), ``estimate`` (how it was counted) and
``upstreams`` (in a fan-out, each request's own usage).
"""

from typing import Dict, List, Literal, Optional

from openai import BaseModel
from openai.types import CompletionUsage

__all__ = ["Usage", "UsageEstimate"]


class UsageEstimate(BaseModel):
    """How an estimated usage was counted."""

    encoding: str
    """The tiktoken encoding used (``o200k_base``...)."""
    model: Optional[str] = None
    model_known: bool
    """Whether the encoding is the model's own (else a default was used)."""
    prompt_counted: bool
    """Whether the prompt was counted (it is when the request was given)."""
    prompt_error: Optional[str] = None
    choices: Dict[int, int] = {}
    """Each choice's completion tokens, by index."""


class Usage(CompletionUsage):
    """Token usage of a completion: openai's ``CompletionUsage``, plus where it comes from."""

    source: Literal["reported", "estimated"]
    estimate: Optional[UsageEstimate] = None
    upstreams: List["Usage"] = []
    """In a fan-out, each upstream's own usage, in order; empty for a single stream."""

    def __getitem__(self, key: str) -> object:
        """``usage["total_tokens"]``: the dict-style reading of choicewise 0.1, whose
        ``usage()`` gave a dict (``to_dict()`` gives that dict whole)."""
        return self.to_dict()[key]
