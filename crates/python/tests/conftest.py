"""Shared helpers: the recorded fixtures (tests/fixtures) and the project's loopback test
server (crates/testserver's binary, CHOICEWISE_TESTSERVER), which serves a fixture as the
SSE body of POST /v1/chat/completions on 127.0.0.1 only."""

import contextlib
import os
import pathlib
import subprocess
from typing import Iterator, List

import pytest

FIXTURES = pathlib.Path(
    os.environ.get("CHOICEWISE_FIXTURES")
    or pathlib.Path(__file__).resolve().parents[3] / "tests" / "fixtures"
)


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def pieces(data: bytes, size: int) -> List[bytes]:
    """The bytes cut every `size` bytes (through lines and UTF-8 characters)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


@contextlib.contextmanager
def serving(fixture: str, *options: str) -> Iterator[str]:
    """The test server serving `fixture` with `options` (--writes 1-9, --close-after N, ...);
    yields its base URL (http://127.0.0.1:PORT/v1)."""
    binary = os.environ.get("CHOICEWISE_TESTSERVER")
    if not binary:
        pytest.fail("CHOICEWISE_TESTSERVER is not set: run the tests with scripts/python.sh test")
    process = subprocess.Popen(
        [binary, "--fixture", str(FIXTURES / fixture), *options],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on "), line
        url = line.split()[-1]
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        process.kill()
        process.wait()
