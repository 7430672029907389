"""The typed surface: one exception class per error kind under ChoicewiseError, the `a`
twins of the waiting methods, usage() as openai's CompletionUsage, and the examples (which
`mypy --strict` checks in scripts/python.sh test) running as written."""

import asyncio
import pathlib
import subprocess
import sys

import openai
import pytest

import choicewise
from conftest import FIXTURES, fixture_bytes, serving

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"

KINDS = {
    "framing": choicewise.FramingError,
    "chunk": choicewise.ChunkError,
    "dialect": choicewise.DialectError,
    "update": choicewise.UpdateError,
    "arguments": choicewise.ArgumentsError,
    "limit": choicewise.LimitError,
    "upstream": choicewise.UpstreamError,
    "transport": choicewise.TransportError,
    "open": choicewise.OpenError,
    "truncated": choicewise.TruncatedError,
    "timeout": choicewise.IdleTimeoutError,
    "internal": choicewise.InternalError,
    "partial_json": choicewise.PartialJsonError,
}


def test_every_kind_has_its_class_under_the_base():
    for kind, cls in KINDS.items():
        assert issubclass(cls, choicewise.ChoicewiseError), kind
        assert cls is not choicewise.ChoicewiseError
        assert cls.__name__ in choicewise.__all__
        assert cls.__module__ == "choicewise"
    assert len(set(KINDS.values())) == len(KINDS)
    # Not the builtin: catching choicewise's timeout does not catch every TimeoutError.
    assert not issubclass(choicewise.IdleTimeoutError, TimeoutError)


def test_an_upstream_error_is_an_upstream_error_with_its_kind():
    completions = choicewise.Completions(fixture_bytes("error_mid_stream.sse"))
    with pytest.raises(choicewise.UpstreamError) as info:
        completions.collect()
    e = info.value
    assert type(e) is choicewise.UpstreamError
    assert e.kind == "upstream" and e.retryable
    assert isinstance(e.partial, openai.types.chat.ChatCompletion)


def test_each_raised_kind_is_its_class():
    cases = [
        (b'data: {"choices": [\n\n', choicewise.ChunkError, "chunk"),
        (b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n', choicewise.TruncatedError, "truncated"),
    ]
    for data, cls, kind in cases:
        with pytest.raises(cls) as info:
            choicewise.Completions(data).collect()
        assert info.value.kind == kind
        with pytest.raises(choicewise.ChoicewiseError):  # the base still catches it
            choicewise.Completions(data).collect()

    def broken():
        yield b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        raise OSError("the socket broke")

    with pytest.raises(choicewise.TransportError, match="the socket broke"):
        choicewise.Completions(broken()).collect()

    def silent():
        yield b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        import time

        time.sleep(1)

    with pytest.raises(choicewise.IdleTimeoutError) as info:
        choicewise.Completions(silent(), idle_timeout=0.1).collect()
    assert info.value.kind == "timeout"

    bad = b'data: {"choices":[{"index":0,"delta":{"content":5}}]}\n\ndata: [DONE]\n\n'
    [(index, error)] = choicewise.Completions(bad).choice_errors()
    assert index == 0 and type(error) is choicewise.UpdateError


def test_usage_is_openais_completion_usage_with_its_source():
    completions = choicewise.Completions(fixture_bytes("demo.sse"))
    usage = completions.usage()
    assert isinstance(usage, openai.types.CompletionUsage)
    assert isinstance(usage, choicewise.Usage)
    assert usage.source in ("reported", "estimated")
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens or usage.source == "reported"
    # The dict of earlier versions, and its reading by key.
    as_dict = usage.to_dict()
    assert as_dict["source"] == usage.source and usage["total_tokens"] == usage.total_tokens
    # The same kind of object as the completion's own usage.
    whole = completions.collect()
    assert isinstance(whole.usage, openai.types.CompletionUsage)
    assert whole.usage.total_tokens == usage.total_tokens


def test_an_estimate_says_how():
    data = b'data: {"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hello there"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    usage = choicewise.Completions(data).usage()
    assert usage.source == "estimated"
    assert usage.estimate is not None and usage.estimate.encoding
    assert usage.estimate.choices == {0: usage.completion_tokens}


def test_the_a_methods_are_awaitables_in_a_coroutine():
    data = fixture_bytes("demo.sse")

    async def main():
        c = choicewise.Completions(data)
        choice = await c.achoice(0)
        message = await choice.amessage()
        whole = await c.acollect()
        usage = await c.ausage()
        errors = await c.achoice_errors()
        selection = await c.afirst_finished(keep_rest=True)
        voted = await c.avote(r"(\w+)", min_votes=1, keep_rest=True)
        picked = await c.apick({"select": "first_finished"}, keep_rest=True)
        cancelled = await c.acancel()
        return message, whole, usage, errors, selection, voted, picked, cancelled

    message, whole, usage, errors, selection, voted, picked, cancelled = asyncio.run(main())
    assert message["index"] == 0 and message["message"]["content"] == whole.choices[0].message.content
    assert isinstance(usage, choicewise.Usage) and errors == [] and cancelled == []
    assert selection and voted and picked and voted.key


def test_an_a_method_outside_a_loop_says_so():
    c = choicewise.Completions(fixture_bytes("demo.sse"))
    with pytest.raises(RuntimeError):
        c.acollect()


def test_the_examples_run_as_written():
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "replay_vote.py"), str(FIXTURES / "demo.sse")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "[choice 0]" in out.stdout and "usage (" in out.stdout

    with serving("openai_n3_tools.sse", "--writes", "1-30") as url:
        out = subprocess.run(
            [sys.executable, str(EXAMPLES / "stream_async.py")],
            capture_output=True,
            text=True,
            timeout=60,
            env={"OPENAI_BASE_URL": url, "PATH": "/usr/bin:/bin"},
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("[choice ") >= 3 and "usage (reported)" in out.stdout, out.stdout
