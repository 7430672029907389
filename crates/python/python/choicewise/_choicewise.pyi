"""Type stubs of the extension module (the Rust engine); the package re-exports these names."""

from typing import Any, AsyncIterable, Awaitable, Dict, Iterable, List, Literal, Optional, TypedDict, Union

__version__: str

_Chunk = Union[bytes, bytearray, memoryview, str]
_Chunks = Union[_Chunk, Iterable[_Chunk], AsyncIterable[_Chunk]]

class ChoicewiseError(Exception):
    """A completion or one of its choices ended in error."""

    kind: str
    """What failed: "framing", "chunk", "dialect", "update", "arguments", "limit", "upstream",
    "transport", "open", "truncated", "timeout", "internal" (or "partial_json")."""
    line: Optional[int]
    offset: Optional[int]
    choice: Optional[int]
    upstream: Optional[int]
    retryable: bool
    partial: Any
    """What was assembled before the error (``collect()``: a ``ChatCompletion`` or dict;
    ``message()``: a dict), else ``None``."""

class PartialJsonError(ChoicewiseError):
    """Invalid JSON fed to ``PartialJson``; ``.offset`` is the byte offset."""

class FunctionCallEvent(TypedDict, total=False):
    type: Literal["started", "arguments", "finished"]
    call: int
    kind: Literal["tool", "function"]
    id: Optional[str]
    name: Optional[str]
    fragment: str
    arguments: str
    value: Any
    error: Optional[str]
    repaired: bool

class ChoiceIterator:
    def __iter__(self) -> ChoiceIterator: ...
    def __next__(self) -> Choice: ...
    def __aiter__(self) -> ChoiceIterator: ...
    def __anext__(self) -> Awaitable[Choice]: ...

class TextIterator:
    def __iter__(self) -> TextIterator: ...
    def __next__(self) -> str: ...
    def __aiter__(self) -> TextIterator: ...
    def __anext__(self) -> Awaitable[str]: ...

class FunctionCallIterator:
    def __iter__(self) -> FunctionCallIterator: ...
    def __next__(self) -> FunctionCallEvent: ...
    def __aiter__(self) -> FunctionCallIterator: ...
    def __anext__(self) -> Awaitable[FunctionCallEvent]: ...

class Choice:
    """One choice of a completion; each stream replays from the start."""

    @property
    def index(self) -> int: ...
    @property
    def cancelled(self) -> bool: ...
    def content(self) -> TextIterator: ...
    def reasoning(self) -> TextIterator: ...
    def refusal(self) -> TextIterator: ...
    def function_calls(self) -> FunctionCallIterator: ...
    def message(self) -> Any:
        """The assembled choice (a dict); an awaitable inside a running event loop."""
    def cancel(self) -> bool: ...

class Selection:
    """What ``vote()`` or ``first_finished()`` picked; false when nothing was."""

    choice: Optional[Choice]
    selected: List[int]
    cancelled: List[int]
    key: Optional[str]
    votes: Optional[int]
    counted: Optional[int]
    reason: Optional[str]
    timed_out: bool
    def __bool__(self) -> bool: ...

class Completions:
    """One streamed completion with several choices, demultiplexed by choice.

    The waiting methods return an awaitable when called where an asyncio event loop runs,
    and their result directly elsewhere (typed ``Any`` for that reason: ``ChatCompletion``,
    ``Selection``... or an awaitable of it)."""

    def __init__(
        self,
        chunks: _Chunks,
        *,
        n: Optional[int] = None,
        request: Optional[Dict[str, Any]] = None,
        idle_timeout: Optional[float] = None,
    ) -> None: ...
    @staticmethod
    def fan_out(streams: List[_Chunks], *, n: Optional[List[int]] = None) -> Completions: ...
    def choices(self) -> ChoiceIterator: ...
    def choice(self, index: int) -> Any:
        """``Optional[Choice]``, or an awaitable of it."""
    def collect(self) -> Any:
        """An openai ``ChatCompletion`` (a dict without openai), or an awaitable of it."""
    def usage(self) -> Any: ...
    def choice_errors(self) -> Any:
        """``List[Tuple[int, ChoicewiseError]]``, or an awaitable of it."""
    def cancel(self) -> Any: ...
    def cancel_except(self, keep: List[int]) -> None: ...
    def vote(
        self,
        pattern: str,
        *,
        min_votes: Optional[int] = None,
        window: Optional[int] = None,
        deadline: Optional[float] = None,
        keep_rest: bool = False,
    ) -> Any:
        """A ``Selection``, or an awaitable of it. The ``vote-K`` rows of docs/picks.md;
        with ``window=4`` over 64 samples, its ``adaptive`` row."""
    def first_finished(self, *, deadline: Optional[float] = None, keep_rest: bool = False) -> Any:
        """A ``Selection``, or an awaitable of it. The ``first-finished`` row of
        docs/picks.md (over 4 samples)."""
    def pick(self, policy: Dict[str, Any], *, keep_rest: bool = False) -> Any:
        """The pick a policy states (the gateway's ``choicewise`` extension's fields): a
        ``Selection``, or an awaitable of it. Each row of docs/picks.md is such a policy
        (``confidence-high``: ``{"samples": 64, "select": "vote", "vote_by": "#### (\\d+)",
        "window": 4, "confidence": {"warmup": 16, "keep": 0.9, "group_tokens": 16}}``)."""
    def warnings(self) -> List[str]: ...

class PartialJson:
    """Incremental partial JSON: ``feed()`` fragments, read ``.value`` at any time.

    ``live=True``: ``.value`` is one object updated in place rather than a fresh snapshot."""

    def __init__(self, *, live: bool = False) -> None: ...
    def feed(self, fragment: Union[str, bytes]) -> None: ...
    @property
    def value(self) -> Any: ...
    @property
    def complete(self) -> bool: ...
    @property
    def bytes_consumed(self) -> int: ...
    def finish(self) -> Any: ...

def run_cli(argv: List[str]) -> int: ...
