"""The shapes of choicewise's plain results, for type checkers: what ``Choice.message()``
gives (``ChoiceOutput``), the events of ``Choice.function_calls()`` (``FunctionCallEvent``),
and ``JsonValue`` (``PartialJson.value``)."""

from typing import Dict, List, Literal, Optional, TypedDict, Union

__all__ = [
    "ChoiceOutput",
    "ChoiceSource",
    "ChoiceUsage",
    "FunctionCallEvent",
    "JsonValue",
    "Message",
    "ToolCall",
    "ToolCallFunction",
]

JsonValue = Union[None, bool, int, float, str, List["JsonValue"], Dict[str, "JsonValue"]]
"""A value as ``json.loads`` gives it."""


class ToolCallFunction(TypedDict):
    name: str
    arguments: str


class ToolCall(TypedDict):
    id: str
    type: str
    function: ToolCallFunction


class _MessageRequired(TypedDict):
    role: str
    content: Optional[str]
    refusal: Optional[str]


class Message(_MessageRequired, total=False):
    """An assembled message (``ChoiceOutput["message"]``)."""

    reasoning_content: str
    tool_calls: List[ToolCall]
    function_call: ToolCallFunction


class ChoiceUsage(TypedDict):
    completion_tokens: int
    source: Literal["reported", "estimated"]


class ChoiceSource(TypedDict, total=False):
    upstream: int
    id: str
    model: str


class _ChoiceOutputRequired(TypedDict):
    index: int
    message: Message
    finish_reason: Optional[str]
    logprobs: Optional[Dict[str, JsonValue]]


class ChoiceOutput(_ChoiceOutputRequired, total=False):
    """What ``Choice.message()`` gives: one choice of a ``chat.completion``, as a dict."""

    content_filter_results: Dict[str, JsonValue]
    usage: ChoiceUsage
    stop_reason: str
    source: ChoiceSource
    cancelled: bool


class FunctionCallEvent(TypedDict, total=False):
    type: Literal["started", "arguments", "finished"]
    call: int
    kind: Literal["tool", "function"]
    id: Optional[str]
    name: Optional[str]
    fragment: str
    arguments: str
    value: JsonValue
    error: Optional[str]
    repaired: bool

