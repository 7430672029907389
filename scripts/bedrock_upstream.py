#!/usr/bin/env python3
"""Scripted AWS Bedrock Runtime ConverseStream upstream for integration tests.

It checks that every request is signed with AWS SigV4 (recomputed with
botocore's own signer) and answers with Bedrock's binary event stream.

Usage::

    python3 scripts/bedrock_upstream.py --script SCRIPT.json [--port 0]
        [--region us-east-1] [--access-key-id AKID] [--secret-access-key SK]
        [--session-token TOKEN] [--record FILE]

It listens on 127.0.0.1:PORT (0 picks a free port), prints exactly one line
``listening on http://127.0.0.1:PORT`` once ready and serves until SIGTERM or
SIGINT (exit code 0).  Credentials default to ``AKIDEXAMPLE`` and the AWS
documentation's example secret, with no session token; the service is always
``bedrock``.  HTTP/1.1 with keep-alive; request bodies by Content-Length or
chunked.  Only ``POST /model/{modelId}/converse-stream`` exists (404 for other
paths, 405 for other methods).  Errors look like Bedrock's: a JSON body
``{"message": ...}``, ``x-amzn-ErrorType: TYPE:http://internal...`` and
``x-amzn-RequestId``.

Signature check, before anything else: no Authorization header gives 403
MissingAuthenticationTokenException; an unknown access key, or a missing or
wrong ``x-amz-security-token`` (or one sent when none is configured), gives
403 UnrecognizedClientException; anything else (scope with another region,
service or date, ``x-amz-date`` missing or more than 5 minutes off, ``host``
or the session token not signed, ``x-amz-content-sha256`` not the body's
SHA-256, signature mismatch) gives 403 InvalidSignatureException.  The
signature is recomputed by ``botocore.auth.SigV4Auth`` over exactly the
headers named in SignedHeaders, as received (botocore's own exclusion list is
not applied), the SHA-256 of the body, and the raw path, which botocore
percent-encodes once more (the double-encoded canonical URI of all non-S3
services: ``v1%3A0`` is canonicalised as ``v1%253A0``).

``--record FILE`` appends one JSON line per request: ``method``, ``path``
(raw), ``model`` (percent-decoded), ``headers`` (lower-case; the signature
and the session token replaced by "…"), ``body`` (parsed JSON or null),
``signature`` ("ok" or the reason), ``canonical_request`` (botocore's, once
computed, token redacted; else null) and ``answer`` (index or null).

Script: ``{"answers": [ANSWER, ...]}``, for example::

    {"answers": [
      {"text": "Hello there world", "usage": [12, 5]},
      {"match": "weather", "tool_uses": [
        {"name": "get_weather", "input": {"city": "Paris"}}]},
      {"match": "busy", "status": 429, "error_type": "ThrottlingException"}
    ]}

Correctly signed requests get the answers without ``match`` in turn
(cyclically; only requests served that way advance the turn), unless
``match`` of some answer occurs in the raw body: then the first such answer
is served.  400 ValidationException if nothing can be served (every answer
has a ``match``) or the body is not JSON.  ANSWER fields, all optional:

- ``status`` (200): otherwise an error response with ``error_type``
  (ValidationException) and ``message`` ("scripted error"), no stream.
- ``events``: ``[[EVENT_TYPE, PAYLOAD_OBJECT], ...]`` sent as they are, or
  else the shorthand below (``text`` ... ``no_metadata``; not both).
- ``text``: messageStart ``{"role": "assistant"}``, then contentBlockDelta
  ``{"contentBlockIndex": i, "delta": {"text": PIECE}}`` per piece of at most
  ``piece_chars`` (4) characters, then contentBlockStop.
- ``reasoning``: a block before the text (the text moves to the next index):
  deltas ``{"reasoningContent": {"text": PIECE}}``, one
  ``{"reasoningContent": {"signature": "sig-<hex>"}}``, contentBlockStop.
- ``tool_uses``: ``[{"id", "name", "input"}, ...]`` (``name`` required,
  ``id`` defaults to ``tooluse_N``, ``input`` to ``{}``), each at the next
  block index: contentBlockStart ``{"start": {"toolUse": {"toolUseId",
  "name"}}}``, deltas ``{"toolUse": {"input": PIECE}}`` over
  ``json.dumps(input)``, contentBlockStop.
- then messageStop ``{"stopReason": stop}`` (``stop``: end_turn, or tool_use
  with tool_uses; ``no_stop``: leave out) and metadata ``{"usage":
  {"inputTokens", "outputTokens", "totalTokens"}, "metrics": {"latencyMs":
  1}}`` from ``usage`` [I, O] (default [10, text pieces + tool input
  pieces]; ``no_metadata``: leave out).
- Every event payload gets Bedrock's padding field ``"p"`` (letters, length
  varying per event) unless it already has one.
- ``exception``: ``{"type", "message"}``: after the events an exception frame
  (``:message-type`` exception, ``:exception-type`` TYPE, payload
  ``{"message"}``); the stream then ends properly.
- ``cut_after`` K: after K frames, close the connection without ending the
  chunked body.
- ``first_byte_delay_ms`` (0) after the response head, before the first
  frame; ``delay_ms`` (0) between writes; ``hold_ms`` (0) after the last
  write, before ending (or cutting) the response.
- ``writes``: ``frames`` (one write per frame), ``whole`` (one write) or
  ``bytes:A-B`` (slices of A..B bytes, random with ``seed``, default 7, so
  frames split anywhere).  Each write is one HTTP chunk.

Frames use the AWS event-stream format (prelude of total length, headers
length and CRC32; string headers ``:event-type``, ``:content-type``
application/json, ``:message-type`` event; compact JSON payload; message
CRC32).  A bad script exits with code 2 and a message naming the field.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import random
import re
import signal
import string
import struct
import sys
import uuid
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any, TextIO
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

SERVICE = "bedrock"
DEFAULT_ACCESS_KEY_ID = "AKIDEXAMPLE"
DEFAULT_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
ERROR_TYPE_SUFFIX = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
MISMATCH = (
    "The request signature we calculated does not match the signature you "
    "provided. Check your AWS Secret Access Key and signing method. Consult "
    "the service documentation for details.")
BAD_TOKEN = "The security token included in the request is invalid."
MAX_SKEW = timedelta(minutes=5)
AMZ_DATE = "%Y%m%dT%H%M%SZ"
ROUTE = re.compile(r"/model/([^/]+)/converse-stream")
PADDING = string.ascii_letters
REDACTED = "…"
Event = tuple[str, dict[str, Any]]


class ScriptError(Exception):
    """A bad field in the script file."""


class BadRequest(Exception):
    """A request that is not valid HTTP/1.1."""


@dataclass
class AuthFailure(Exception):
    """A failed signature check: the error to answer and what to record."""

    error_type: str
    message: str
    reason: str = ""


@dataclass
class Answer:
    """One scripted answer, with its event-stream frames already encoded."""

    index: int
    match: str | None
    status: int
    error_type: str
    message: str
    frames: list[bytes]
    cut_after: int | None
    first_byte_delay: float
    delay: float
    hold: float
    writes: str | tuple[int, int]  # "frames", "whole" or a byte range
    seed: int


@dataclass
class Config:
    access_key_id: str
    secret_access_key: str
    session_token: str | None
    region: str


# --- event stream ---------------------------------------------------------

def encode_frame(headers: list[tuple[str, str]], payload: bytes) -> bytes:
    """One AWS event-stream message with string (type 7) headers."""
    head = b""
    for name, value in headers:
        raw_name, raw_value = name.encode(), value.encode()
        head += struct.pack(">B", len(raw_name)) + raw_name
        head += b"\x07" + struct.pack(">H", len(raw_value)) + raw_value
    prelude = struct.pack(">II", 12 + len(head) + len(payload) + 4, len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + payload
    return message + struct.pack(">I", zlib.crc32(message))


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"),
                      ensure_ascii=False).encode()


def event_frame(event_type: str, payload: dict[str, Any], n: int) -> bytes:
    if "p" not in payload:
        payload = {**payload, "p": PADDING[:1 + (n * 7) % len(PADDING)]}
    return encode_frame([(":event-type", event_type),
                         (":content-type", "application/json"),
                         (":message-type", "event")], compact(payload))


# --- script ---------------------------------------------------------------

FIELDS: dict[str, type | tuple[type, ...]] = {
    "match": str, "status": int, "error_type": str, "message": str,
    "events": list, "text": str, "reasoning": str, "tool_uses": list,
    "piece_chars": int, "stop": str, "usage": list, "no_metadata": bool,
    "no_stop": bool, "exception": dict, "cut_after": int,
    "first_byte_delay_ms": (int, float), "delay_ms": (int, float),
    "hold_ms": (int, float), "writes": str, "seed": int,
}

SHORTHAND = {"text", "reasoning", "tool_uses", "piece_chars", "stop", "usage",
             "no_metadata", "no_stop"}


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def delta(block: int, value: dict[str, Any]) -> Event:
    return "contentBlockDelta", {"contentBlockIndex": block, "delta": value}


def tool_block(tool: Any, n: int, block: int, size: int,
               where: str) -> list[Event]:
    """contentBlockStart and the input deltas of a tool use."""
    here = f"{where}.tool_uses[{n}]"
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise ScriptError(f"{here}: must be an object with a string name")
    unknown = sorted(set(tool) - {"id", "name", "input"})
    if unknown:
        raise ScriptError(f"{here}.{unknown[0]}: unknown field")
    tool_id = tool.get("id", f"tooluse_{n + 1}")
    if not isinstance(tool_id, str):
        raise ScriptError(f"{here}.id: must be a string")
    tool_use = {"toolUseId": tool_id, "name": tool["name"]}
    return [("contentBlockStart", {"contentBlockIndex": block,
                                   "start": {"toolUse": tool_use}}),
            *(delta(block, {"toolUse": {"input": piece}})
              for piece in pieces(json.dumps(tool.get("input", {})), size))]


def shorthand_events(spec: dict[str, Any], where: str) -> list[Event]:
    """The events described by text, reasoning, tool_uses, stop, usage."""
    size = spec.get("piece_chars", 4)
    if size < 1:
        raise ScriptError(f"{where}.piece_chars: must be at least 1")
    events: list[Event] = [("messageStart", {"role": "assistant"})]
    blocks: list[list[Event]] = []
    reasoning = spec.get("reasoning", "")
    if reasoning:
        digest = hashlib.sha256(reasoning.encode()).hexdigest()[:16]
        signature = {"reasoningContent": {"signature": f"sig-{digest}"}}
        blocks.append([delta(0, {"reasoningContent": {"text": piece}})
                       for piece in pieces(reasoning, size)]
                      + [delta(0, signature)])
    output_pieces = 0
    if spec.get("text"):
        blocks.append([delta(len(blocks), {"text": piece})
                       for piece in pieces(spec["text"], size)])
        output_pieces += len(blocks[-1])
    tool_uses = spec.get("tool_uses", [])
    for n, tool in enumerate(tool_uses):
        blocks.append(tool_block(tool, n, len(blocks), size, where))
        output_pieces += len(blocks[-1]) - 1  # not the contentBlockStart
    for index, block in enumerate(blocks):
        events += block + [("contentBlockStop", {"contentBlockIndex": index})]
    if not spec.get("no_stop"):
        stop = spec.get("stop", "tool_use" if tool_uses else "end_turn")
        events.append(("messageStop", {"stopReason": stop}))
    usage = spec.get("usage", [10, output_pieces])
    if len(usage) != 2 or not all(type(u) is int for u in usage):
        raise ScriptError(f"{where}.usage: must be [inputTokens, "
                          "outputTokens]")
    if not spec.get("no_metadata"):
        events.append(("metadata", {
            "usage": {"inputTokens": usage[0], "outputTokens": usage[1],
                      "totalTokens": usage[0] + usage[1]},
            "metrics": {"latencyMs": 1}}))
    return events


def explicit_events(raw: list[Any], where: str) -> list[Event]:
    for n, item in enumerate(raw):
        if (not isinstance(item, list) or len(item) != 2
                or not isinstance(item[0], str)
                or not isinstance(item[1], dict)):
            raise ScriptError(
                f"{where}.events[{n}]: must be [EVENT_TYPE, PAYLOAD_OBJECT]")
    return [(kind, payload) for kind, payload in raw]


def parse_writes(spec: str, where: str) -> str | tuple[int, int]:
    if spec in ("frames", "whole"):
        return spec
    found = re.fullmatch(r"bytes:(\d+)-(\d+)", spec)
    if not found or not 1 <= int(found[1]) <= int(found[2]):
        raise ScriptError(f"{where}.writes: expected frames, whole or "
                          f"bytes:A-B with 1 <= A <= B, got {spec!r}")
    return int(found[1]), int(found[2])


def parse_answer(spec: Any, index: int) -> Answer:
    where = f"answers[{index}]"
    if not isinstance(spec, dict):
        raise ScriptError(f"{where}: must be an object")
    for key, value in spec.items():
        if key not in FIELDS:
            raise ScriptError(f"{where}.{key}: unknown field")
        if not isinstance(value, FIELDS[key]) or (
                isinstance(value, bool) and FIELDS[key] is not bool):
            raise ScriptError(
                f"{where}.{key}: wrong type {type(value).__name__}")
        if key in ("cut_after", "first_byte_delay_ms", "delay_ms",
                   "hold_ms") and value < 0:
            raise ScriptError(f"{where}.{key}: must not be negative")
    shorthand = sorted(set(spec) & SHORTHAND)
    if "events" in spec and shorthand:
        raise ScriptError(f"{where}.{shorthand[0]}: cannot be combined "
                          "with events")
    events = (explicit_events(spec["events"], where) if "events" in spec
              else shorthand_events(spec, where))
    frames = [event_frame(kind, payload, n)
              for n, (kind, payload) in enumerate(events)]
    if "exception" in spec:
        exc = spec["exception"]
        if not isinstance(exc.get("type"), str) or not isinstance(
                exc.get("message", ""), str):
            raise ScriptError(f"{where}.exception: needs a string type "
                              "and a string message")
        frames.append(encode_frame(
            [(":message-type", "exception"), (":exception-type", exc["type"]),
             (":content-type", "application/json")],
            compact({"message": exc.get("message", "")})))
    status = spec.get("status", 200)
    if status not in HTTPStatus.__members__.values() or status < 200:
        raise ScriptError(f"{where}.status: not an HTTP status: {status}")
    return Answer(
        index=index, match=spec.get("match"), status=status,
        error_type=spec.get("error_type", "ValidationException"),
        message=spec.get("message", "scripted error"), frames=frames,
        cut_after=spec.get("cut_after"),
        first_byte_delay=spec.get("first_byte_delay_ms", 0) / 1000,
        delay=spec.get("delay_ms", 0) / 1000,
        hold=spec.get("hold_ms", 0) / 1000,
        writes=parse_writes(spec.get("writes", "frames"), where),
        seed=spec.get("seed", 7))


def load_script(path: str) -> list[Answer]:
    try:
        with open(path, encoding="utf-8") as handle:
            script = json.load(handle)
    except (OSError, ValueError) as err:
        raise ScriptError(f"cannot read {path}: {err}") from err
    if not isinstance(script, dict) or not isinstance(
            script.get("answers"), list) or not script["answers"]:
        raise ScriptError('answers: the script must be {"answers": [ANSWER, '
                          '...]} with at least one answer')
    unknown = sorted(set(script) - {"answers"})
    if unknown:
        raise ScriptError(f"{unknown[0]}: unknown field")
    return [parse_answer(spec, n) for n, spec in enumerate(script["answers"])]


def writes_of(answer: Answer) -> list[bytes]:
    """The response body as the scripted sequence of writes."""
    frames = answer.frames[:answer.cut_after]
    if answer.writes == "frames":
        return frames
    data = b"".join(frames)
    if answer.writes == "whole":
        return [data] if data else []
    rng = random.Random(answer.seed)
    out = []
    while data:
        size = rng.randint(*answer.writes)
        out.append(data[:size])
        data = data[size:]
    return out


# --- SigV4 ----------------------------------------------------------------

class ClientSignedHeaders(SigV4Auth):
    """botocore's SigV4 over every header of the request, none excluded.

    The request holds exactly the headers the client listed in SignedHeaders,
    so this signs what the client signed even where botocore's own list of
    headers never to sign (user-agent, expect, connection...) differs.
    """

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        header_map = HTTPHeaders()
        for name, value in request.headers.items():
            header_map[name.lower()] = value
        return header_map


def invalid(message: str, reason: str = "") -> AuthFailure:
    return AuthFailure("InvalidSignatureException", message, reason)


def parse_authorization(value: str) -> dict[str, str]:
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        raise invalid(f"Unsupported signing algorithm {algorithm!r}.")
    parts = {}
    for item in rest.split(","):
        key, _, val = item.strip().partition("=")
        parts[key] = val
    for key in ("Credential", "SignedHeaders", "Signature"):
        if not parts.get(key):
            raise invalid(f"Authorization header requires '{key}' parameter.")
    return parts


def check_signature(config: Config, method: str, target: str,
                    headers: list[tuple[str, str]], body: bytes,
                    record: dict[str, Any]) -> None:
    """Raise AuthFailure unless the request is correctly signed."""
    fields: dict[str, str] = {}
    for name, value in headers:
        fields[name] = f"{fields[name]},{value}" if name in fields else value
    if "authorization" not in fields:
        raise AuthFailure("MissingAuthenticationTokenException",
                          "Missing Authentication Token", "no authorization")
    auth = parse_authorization(fields["authorization"])
    scope = auth["Credential"].split("/")
    if len(scope) != 5:
        raise invalid("Credential must have exactly 5 slash-delimited "
                      "elements, e.g. keyid/date/region/service/term.")
    key_id, day, region, service, terminator = scope
    if key_id != config.access_key_id:
        raise AuthFailure("UnrecognizedClientException", BAD_TOKEN,
                          "unknown access key id")
    if region != config.region:
        raise invalid(f"Credential should be scoped to a valid region, "
                      f"not '{region}'.")
    if service != SERVICE:
        raise invalid(f"Credential should be scoped to correct service: "
                      f"'{SERVICE}', not '{service}'.")
    if terminator != "aws4_request":
        raise invalid("Credential should be scoped with a valid terminator: "
                      f"'aws4_request', not '{terminator}'.")
    amz_date = fields.get("x-amz-date", "")
    try:
        signed_at = datetime.strptime(amz_date, AMZ_DATE).replace(
            tzinfo=timezone.utc)
    except ValueError:
        raise invalid("Authorization header requires an 'X-Amz-Date' header "
                      f"of the form YYYYMMDDTHHMMSSZ, got {amz_date!r}."
                      ) from None
    if amz_date[:8] != day:
        raise invalid("Date in Credential scope does not match YYYYMMDD from "
                      f"ISO-8601 version of date from HTTP: '{day}' != "
                      f"'{amz_date[:8]}', from '{amz_date}'.")
    now = datetime.now(timezone.utc)
    if abs(signed_at - now) > MAX_SKEW:
        late = signed_at < now
        limit = (now - MAX_SKEW if late else now + MAX_SKEW).strftime(AMZ_DATE)
        raise invalid(
            f"Signature expired: {amz_date} is now earlier than {limit} "
            f"({now.strftime(AMZ_DATE)} - 5 min.)" if late else
            f"Signature not yet current: {amz_date} is still later than "
            f"{limit} ({now.strftime(AMZ_DATE)} + 5 min.)")
    signed = auth["SignedHeaders"].split(";")
    if "host" not in signed:
        raise invalid("'Host' or ':authority' must be a 'SignedHeader' in "
                      "the AWS Authorization.")
    missing = [name for name in signed if name not in fields]
    if missing:
        raise invalid(f"Signed header(s) {missing} not in the request.")
    content_sha = fields.get("x-amz-content-sha256")
    if content_sha not in (None, hashlib.sha256(body).hexdigest()):
        raise invalid("The provided 'x-amz-content-sha256' header does not "
                      "match what was computed.")
    token = fields.get("x-amz-security-token")
    if (token is None) != (config.session_token is None) or (
            token is not None and not hmac.compare_digest(
                token.encode(), str(config.session_token).encode())):
        raise AuthFailure("UnrecognizedClientException", BAD_TOKEN,
                          "session token missing, wrong or unexpected")
    if token is not None and "x-amz-security-token" not in signed:
        raise invalid("'x-amz-security-token' must be a SignedHeader.")
    to_sign = HTTPHeaders()
    for name, value in headers:
        if name in signed:
            to_sign[name] = value
    request = AWSRequest(method, f"http://{fields['host']}{target}",
                         headers=to_sign, data=body)
    request.context["timestamp"] = amz_date
    signer = ClientSignedHeaders(
        Credentials(config.access_key_id, config.secret_access_key,
                    config.session_token), SERVICE, config.region)
    canonical = signer.canonical_request(request)
    record["canonical_request"] = (
        canonical.replace(token, REDACTED) if token else canonical)
    expected = signer.signature(signer.string_to_sign(request, canonical),
                                request)
    if not hmac.compare_digest(expected.encode(), auth["Signature"].encode()):
        raise invalid(MISMATCH, "signature mismatch")


# --- HTTP -----------------------------------------------------------------

def redact(headers: list[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers:
        if name == "authorization":
            value = re.sub(r"Signature=[^,\s]*", "Signature=" + REDACTED,
                           value)
        elif name == "x-amz-security-token":
            value = REDACTED
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def response_head(status: int, headers: list[tuple[str, str]],
                  keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
             f"x-amzn-RequestId: {uuid.uuid4()}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if not keep_alive:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def error_response(status: int, error_type: str, message: str,
                   keep_alive: bool) -> bytes:
    body = compact({"message": message})
    return response_head(status, [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("x-amzn-ErrorType", error_type + ERROR_TYPE_SUFFIX)],
        keep_alive) + body


async def read_head(reader: asyncio.StreamReader
                    ) -> tuple[str, str, str, list[tuple[str, str]]] | None:
    """Method, target, version and headers; None at a clean end of stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as err:
        if err.partial.strip():
            raise BadRequest("incomplete request head") from None
        return None
    lines = head.decode("latin-1").split("\r\n")
    request_line = lines[0].split(" ")
    if len(request_line) != 3 or not request_line[2].startswith("HTTP/1."):
        raise BadRequest("malformed request line")
    headers = []
    for line in filter(None, lines[1:]):
        name, colon, value = line.partition(":")
        if not colon:
            raise BadRequest(f"malformed header line {line!r}")
        headers.append((name.strip().lower(), value.strip(" \t")))
    method, target, version = request_line
    return method, target, version, headers


async def read_body(reader: asyncio.StreamReader,
                    fields: dict[str, str]) -> bytes:
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = b""
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadRequest("bad chunk size") from None
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailer fields are ignored
                return body
            body += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                raise BadRequest("chunk not followed by CRLF")
    try:
        return await reader.readexactly(int(fields.get("content-length", 0)))
    except ValueError:
        raise BadRequest("bad content-length") from None


class Upstream:
    """The scripted server: one instance serves every connection."""

    def __init__(self, config: Config, answers: list[Answer],
                 record: TextIO | None) -> None:
        self.config = config
        self.answers = answers
        self.in_turn = [a for a in answers if a.match is None]
        self.turn = 0
        self.record = record

    async def handle(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        try:
            while await self.serve_one(reader, writer):
                pass
        except BadRequest as err:
            writer.write(error_response(400, "BadRequest", str(err), False))
        except (ConnectionError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # shutting down: asyncio.run cancels open connections
        finally:
            writer.close()

    def choose(self, body: bytes) -> Answer | None:
        text = body.decode("utf-8", "replace")
        for answer in self.answers:
            if answer.match is not None and answer.match in text:
                return answer
        if not self.in_turn:
            return None
        self.turn += 1
        return self.in_turn[(self.turn - 1) % len(self.in_turn)]

    def route(self, method: str, target: str, headers: list[tuple[str, str]],
              body: bytes, record: dict[str, Any]
              ) -> tuple[Answer | None, tuple[int, str, str]]:
        """The answer to serve, else the error (status, type, message)."""
        try:
            check_signature(self.config, method, target, headers, body,
                            record)
        except AuthFailure as failure:
            record["signature"] = failure.reason or failure.message
            return None, (403, failure.error_type, failure.message)
        if record["model"] is None:
            return None, (404, "UnknownOperationException",
                          f"No route for {target}")
        if method != "POST":
            return None, (405, "UnknownOperationException",
                          f"Method {method} not allowed")
        if body and record["body"] is None:
            return None, (400, "ValidationException",
                          "The request body is not valid JSON")
        answer = self.choose(body)
        if answer is None:
            return None, (400, "ValidationException",
                          "No scripted answer matches this request")
        record["answer"] = answer.index
        return answer, (answer.status, answer.error_type, answer.message)

    async def serve_one(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> bool:
        """Serve one request; return whether the connection stays open."""
        head = await read_head(reader)
        if head is None:
            return False
        method, target, version, headers = head
        fields = dict(headers)
        tokens = fields.get("connection", "").lower()
        keep_alive = ("close" not in tokens if version == "HTTP/1.1"
                      else "keep-alive" in tokens)
        if fields.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await read_body(reader, fields)
        route = ROUTE.fullmatch(target.split("?", 1)[0])
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        record: dict[str, Any] = {
            "method": method, "path": target,
            "model": unquote(route[1]) if route else None,
            "headers": redact(headers), "body": parsed, "signature": "ok",
            "canonical_request": None, "answer": None}
        answer, (status, error_type, message) = self.route(
            method, target, headers, body, record)
        if self.record is not None:
            self.record.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.record.flush()
        if answer is None or status != 200:
            writer.write(error_response(status, error_type, message,
                                        keep_alive))
            await writer.drain()
            return keep_alive
        return await self.stream(writer, answer, keep_alive)

    async def stream(self, writer: asyncio.StreamWriter, answer: Answer,
                     keep_alive: bool) -> bool:
        writer.write(response_head(200, [
            ("content-type", "application/vnd.amazon.eventstream"),
            ("transfer-encoding", "chunked")], keep_alive))
        await writer.drain()
        await asyncio.sleep(answer.first_byte_delay)
        for n, data in enumerate(writes_of(answer)):
            if n:
                await asyncio.sleep(answer.delay)
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
        await asyncio.sleep(answer.hold)
        if answer.cut_after is not None:
            writer.transport.abort()
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return keep_alive


async def serve(args: argparse.Namespace, answers: list[Answer]) -> None:
    config = Config(args.access_key_id, args.secret_access_key,
                    args.session_token, args.region)
    record = open(args.record, "a", encoding="utf-8") if args.record else None
    try:
        upstream = Upstream(config, answers, record)
        server = await asyncio.start_server(upstream.handle, "127.0.0.1",
                                            args.port)
        port = server.sockets[0].getsockname()[1]
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        server.close()
    finally:
        if record is not None:
            record.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Scripted AWS Bedrock ConverseStream upstream "
                    "(the module docstring documents the script format).")
    parser.add_argument("--script", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--access-key-id", default=DEFAULT_ACCESS_KEY_ID)
    parser.add_argument("--secret-access-key",
                        default=DEFAULT_SECRET_ACCESS_KEY)
    parser.add_argument("--session-token")
    parser.add_argument("--record")
    args = parser.parse_args()
    try:
        answers = load_script(args.script)
    except ScriptError as err:
        print(f"bedrock_upstream: script error: {err}", file=sys.stderr)
        sys.exit(2)
    asyncio.run(serve(args, answers))


if __name__ == "__main__":
    main()
