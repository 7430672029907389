"""Type stubs of the extension module (the Rust engine); the package re-exports these names.

The results are typed as they are with the ``openai`` extra installed (``pip install
"choicewise[openai]"``): ``collect()`` gives openai's ``ChatCompletion`` and ``usage()`` a
``choicewise.Usage`` (openai's ``CompletionUsage``). Without openai they are dicts of the
same shape, and a type checker sees these names as unknown.

Every waiting method comes in two: ``collect()`` waits and returns the result (a plain
script, a thread); ``acollect()`` returns an awaitable of it, for a coroutine.
"""

from typing import (
    AsyncIterable,
    Awaitable,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Tuple,
    TypedDict,
    Union,
)

from openai.types.chat import ChatCompletion

from ._openai_types import Usage
from .types import ChoiceOutput, FunctionCallEvent, JsonValue

__version__: str

class _ConfidenceOptions(TypedDict, total=False):
    """A policy's ``confidence`` (a vote guided by the model's confidence): every field
    optional, the defaults those of its ``measure`` (docs/gateway.md)."""

    measure: Literal["sampled", "top_k"]
    """``"sampled"`` (default): the sampled token's log-probability (asks ``logprobs`` only;
    warmup 8, keep 0.1, group_tokens 4). ``"top_k"``: DeepConf's (asks ``top_logprobs``;
    warmup 8, keep 0.9, group_tokens 64)."""
    warmup: int
    keep: float
    group_tokens: int
    top_logprobs: int
    consensus: float

_Chunk = Union[bytes, bytearray, memoryview, str]
_Chunks = Union[_Chunk, Iterable[_Chunk], AsyncIterable[_Chunk]]

class ChoicewiseError(Exception):
    """A completion or one of its choices ended in error; the base of one class per kind."""

    kind: str
    """What failed: "framing", "chunk", "dialect", "update", "arguments", "limit", "upstream",
    "transport", "open", "truncated", "timeout", "internal" (or "partial_json"): the
    subclass's kind, for the callers that compared strings."""
    line: Optional[int]
    offset: Optional[int]
    choice: Optional[int]
    upstream: Optional[int]
    retryable: bool
    partial: Union[ChatCompletion, ChoiceOutput, None]
    """What was assembled before the error (``collect()``: a ``ChatCompletion``;
    ``message()``: a ``ChoiceOutput``), else ``None``."""

class FramingError(ChoicewiseError):
    """The bytes are not a valid event stream (``kind`` "framing")."""

class ChunkError(ChoicewiseError):
    """An event's data is not a chunk, or names an impossible choice index ("chunk")."""

class DialectError(ChoicewiseError):
    """An event of another dialect than the stream's ("dialect")."""

class UpdateError(ChoicewiseError):
    """One choice's update or tool call is malformed; only that choice failed ("update")."""

class ArgumentsError(ChoicewiseError):
    """A call's complete arguments are not valid JSON or not the requested type
    ("arguments")."""

class LimitError(ChoicewiseError):
    """More choices than the configured maximum ("limit")."""

class UpstreamError(ChoicewiseError):
    """The provider reported an error in the stream ("upstream")."""

class TransportError(ChoicewiseError):
    """Reading the stream failed: a connection closed, an I/O error ("transport")."""

class OpenError(ChoicewiseError):
    """The request failed before its stream began ("open")."""

class TruncatedError(ChoicewiseError):
    """The stream ended while something was unfinished ("truncated")."""

class IdleTimeoutError(ChoicewiseError):
    """Nothing arrived for longer than the idle timeout ("timeout")."""

class InternalError(ChoicewiseError):
    """An actor failed: a bug, reported rather than hidden ("internal")."""

class PartialJsonError(ChoicewiseError):
    """Invalid JSON fed to ``PartialJson``; ``.offset`` is the byte offset ("partial_json")."""

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
    @property
    def cancel_reason(self) -> Optional[str]:
        """Why the choice was cancelled (``"asked"``, ``"reader_gone"``, ``"decided"``,
        ``"low_confidence"``, ``"closing"``, ``"deadline"``, ``"shutting_down"``), or ``None``."""
    def content(self) -> TextIterator: ...
    def reasoning(self) -> TextIterator: ...
    def refusal(self) -> TextIterator: ...
    def function_calls(self) -> FunctionCallIterator: ...
    def message(self) -> ChoiceOutput:
        """The assembled choice, once it is over."""
    def amessage(self) -> Awaitable[ChoiceOutput]: ...
    def cancel(self) -> bool: ...

class Selection:
    """What ``vote()``, ``first_finished()`` or ``pick()`` picked; false when nothing was."""

    @property
    def choice(self) -> Optional[Choice]: ...
    @property
    def selected(self) -> List[int]: ...
    @property
    def cancelled(self) -> List[int]: ...
    @property
    def key(self) -> Optional[str]: ...
    @property
    def votes(self) -> Optional[int]: ...
    @property
    def counted(self) -> Optional[int]: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def timed_out(self) -> bool: ...
    def __bool__(self) -> bool: ...

class Completions:
    """One streamed completion with several choices, demultiplexed by choice.

    Each waiting method has an ``a`` twin returning an awaitable (``collect()`` and
    ``acollect()``...). For the callers written before the twins, ``collect()`` and the others
    still return an awaitable when called where an asyncio loop runs; typed code awaits the
    ``a`` methods."""

    def __init__(
        self,
        chunks: _Chunks,
        *,
        n: Optional[int] = None,
        request: Optional[Mapping[str, object]] = None,
        idle_timeout: Optional[float] = None,
    ) -> None: ...
    @staticmethod
    def fan_out(streams: List[_Chunks], *, n: Optional[List[int]] = None) -> Completions: ...
    def choices(self) -> ChoiceIterator: ...
    def choice(self, index: int) -> Optional[Choice]: ...
    def achoice(self, index: int) -> Awaitable[Optional[Choice]]: ...
    def collect(self) -> ChatCompletion:
        """An openai ``ChatCompletion`` (a dict without openai)."""
    def acollect(self) -> Awaitable[ChatCompletion]: ...
    def usage(self) -> Usage:
        """A ``choicewise.Usage`` (openai's ``CompletionUsage`` with ``source``; a dict
        without openai)."""
    def ausage(self) -> Awaitable[Usage]: ...
    def choice_errors(self) -> List[Tuple[int, ChoicewiseError]]: ...
    def achoice_errors(self) -> Awaitable[List[Tuple[int, ChoicewiseError]]]: ...
    def cancel(self) -> List[int]: ...
    def acancel(self) -> Awaitable[List[int]]: ...
    def cancel_except(self, keep: List[int]) -> None: ...
    def vote(
        self,
        pattern: str,
        *,
        min_votes: Optional[int] = None,
        window: Optional[int] = None,
        deadline: Optional[float] = None,
        keep_rest: bool = False,
    ) -> Selection:
        """The ``vote-K`` rows of docs/picks.md; with ``window=4`` over 64 samples, its
        ``adaptive`` row."""
    def avote(
        self,
        pattern: str,
        *,
        min_votes: Optional[int] = None,
        window: Optional[int] = None,
        deadline: Optional[float] = None,
        keep_rest: bool = False,
    ) -> Awaitable[Selection]: ...
    def first_finished(self, *, deadline: Optional[float] = None, keep_rest: bool = False) -> Selection:
        """The ``first-finished`` row of docs/picks.md (over 4 samples)."""
    def afirst_finished(
        self, *, deadline: Optional[float] = None, keep_rest: bool = False
    ) -> Awaitable[Selection]: ...
    def pick(self, policy: Mapping[str, object], *, keep_rest: bool = False) -> Selection:
        """The pick a policy states (the gateway's ``choicewise`` extension's fields). Each row
        of docs/picks.md is such a policy (``sampled-low``: ``{"samples": 64, "select":
        "vote", "vote_by": "#### (\\d+)", "window": 4, "confidence": {"measure": "sampled",
        "warmup": 8, "keep": 0.1, "group_tokens": 4}}``). ``confidence`` is a
        ``_ConfidenceOptions``: its ``measure`` is ``"sampled"`` (the default: each token's own
        log-probability, the vote weighing ``exp`` of a sample's lowest window mean) or
        ``"top_k"`` (DeepConf's minus the mean of the top-k), each with its own defaults."""
    def apick(self, policy: Mapping[str, object], *, keep_rest: bool = False) -> Awaitable[Selection]: ...
    def warnings(self) -> List[str]: ...

class PartialJson:
    """Incremental partial JSON: ``feed()`` fragments, read ``.value`` at any time.

    ``live=True``: ``.value`` is one object updated in place rather than a fresh snapshot."""

    def __init__(self, *, live: bool = False) -> None: ...
    def feed(self, fragment: Union[str, bytes]) -> None: ...
    @property
    def value(self) -> JsonValue: ...
    @property
    def complete(self) -> bool: ...
    @property
    def bytes_consumed(self) -> int: ...
    def finish(self) -> JsonValue: ...

def run_cli(argv: List[str]) -> int: ...
