"""Per-choice streams for streamed chat completions with several choices (``n > 1``).

A streamed completion with ``n > 1`` arrives as one stream whose chunks interleave the
choices, out of order. ``choicewise`` splits it into one stream per choice, with the Rust
engine underneath (the GIL is released while it parses)::

    import choicewise

    async with choicewise.stream(client, model="gpt-4o-mini", n=3, messages=[...]) as completions:
        async for choice in completions.choices():      # in order of first appearance
            asyncio.create_task(show(choice))           # choice.index, choice.content()
        whole = await completions.acollect()            # an openai ChatCompletion

    completions = choicewise.Completions(byte_chunks)   # any sync or async iterable of bytes
    winner = completions.vote(r"Answer: (\\d+)")         # a Selection

Every waiting method has an ``a`` twin returning an awaitable: ``collect()`` waits and
returns the result, ``await acollect()`` in a coroutine (likewise ``vote()``/``avote()``,
``message()``/``amessage()``, ``usage()``/``ausage()``...). Every iterator (``choices()``,
``content()``, ``function_calls()``) is both an iterator and an async iterator. Errors are
``ChoicewiseError`` subclasses, one per kind (``UpstreamError``, ``TransportError``...), with
``.kind``, ``.line``, ``.offset``, ``.choice``.
"""

import json
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from ._choicewise import (
    ArgumentsError,
    Choice,
    ChoiceIterator,
    ChoicewiseError,
    ChunkError,
    Completions,
    DialectError,
    FramingError,
    FunctionCallIterator,
    IdleTimeoutError,
    InternalError,
    LimitError,
    OpenError,
    PartialJson,
    PartialJsonError,
    Selection,
    TextIterator,
    TransportError,
    TruncatedError,
    UpdateError,
    UpstreamError,
    __version__,
)
from .types import ChoiceOutput, FunctionCallEvent, JsonValue

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

__all__ = [
    "ArgumentsError",
    "Choice",
    "ChoiceIterator",
    "ChoiceOutput",
    "ChoicewiseError",
    "ChunkError",
    "Completions",
    "DialectError",
    "FramingError",
    "FunctionCallEvent",
    "FunctionCallIterator",
    "IdleTimeoutError",
    "InternalError",
    "JsonValue",
    "LimitError",
    "OpenError",
    "PartialJson",
    "PartialJsonError",
    "Selection",
    "TextIterator",
    "TransportError",
    "TruncatedError",
    "UpdateError",
    "UpstreamError",
    "__version__",
    "stream",
]

try:  # with openai installed: usage() gives a Usage (openai's CompletionUsage)
    from ._openai_types import Usage, UsageEstimate

    __all__ += ["Usage", "UsageEstimate"]
except ImportError:  # pragma: no cover - openai is optional
    pass


def _request_json(params: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The request body as JSON, for the token estimate of the prompt (``None`` if some
    parameter is not plain JSON)."""
    try:
        body: Dict[str, Any] = json.loads(json.dumps(params))
    except (TypeError, ValueError):
        return None
    return body


class stream:
    """A streamed chat completion request made with an openai client, as ``Completions``.

    ``async with stream(async_client, **params) as completions`` (an ``openai.AsyncOpenAI``),
    or ``with stream(client, **params)`` (an ``openai.OpenAI``): ``params`` are those of
    ``client.chat.completions.create`` (``model``, ``n``, ``messages``, ``tools``...),
    ``stream=True`` is added, and ``stream_options={"include_usage": True}`` unless the
    request sets its own (``stream_options=None`` sends none): ``usage()`` is then the
    provider's own count, as the CLI and the gateway report it.

    The request is the client's own (``chat.completions.with_streaming_response``): its
    base URL, key, headers, retries, timeouts and Azure settings apply, and an error status
    raises openai's own exception. Its response bytes are read by the Rust engine.

    Leaving the block cancels every choice still open and closes the response; cancelling
    the task inside the block does the same.
    """

    def __init__(self, client: "Union[OpenAI, AsyncOpenAI]", **params: object) -> None:
        self._client: Any = client
        self._params: Dict[str, Any] = params
        self._manager: Any = None
        self.completions: Optional[Completions] = None

    def _start(self, response: Any, chunks: Any) -> Completions:
        n = self._params.get("n")
        self.completions = Completions(
            chunks,
            n=n if isinstance(n, int) else None,
            request=_request_json(self._params),
        )
        return self.completions

    def _create(self) -> Any:
        params = dict(self._params)
        params["stream"] = True
        # The provider's own usage figures, as every front end asks for them (the Rust
        # client, the CLI): a request's own stream_options is kept, None sends none.
        if "stream_options" not in params:
            params["stream_options"] = {"include_usage": True}
        elif params["stream_options"] is None:
            del params["stream_options"]
        return self._client.chat.completions.with_streaming_response.create(**params)

    async def __aenter__(self) -> Completions:
        self._manager = self._create()
        if not hasattr(self._manager, "__aenter__"):
            raise TypeError("async with choicewise.stream(...) needs an openai.AsyncOpenAI client")
        response = await self._manager.__aenter__()
        return self._start(response, response.iter_bytes())

    async def __aexit__(self, *exc: object) -> Optional[bool]:
        try:
            if self.completions is not None:
                self.completions.cancel_except([])
        finally:
            suppress: Optional[bool] = await self._manager.__aexit__(*exc)
        return suppress

    def __enter__(self) -> Completions:
        self._manager = self._create()
        if not hasattr(self._manager, "__enter__"):
            raise TypeError("with choicewise.stream(...) needs an openai.OpenAI client")
        response = self._manager.__enter__()
        return self._start(response, response.iter_bytes())

    def __exit__(self, *exc: object) -> Optional[bool]:
        try:
            if self.completions is not None:
                self.completions.cancel_except([])
        finally:
            suppress: Optional[bool] = self._manager.__exit__(*exc)
        return suppress
