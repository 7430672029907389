"""Self-test of bedrock_upstream.py.

Run from the repository root::

    python3 -m unittest scripts/bedrock_upstream_test.py

Starts the upstream twice (without and with a session token), signs requests
with botocore's real signer (``SigV4Auth.add_auth``), sends them with
http.client and decodes the answers with botocore's event-stream parser,
which checks both CRCs of every frame.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest import mock

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "bedrock_upstream.py")
AKID = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "session-token-example"
MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
PATH = "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
BODY = json.dumps({"messages": [{"role": "user",
                                 "content": [{"text": "hi"}]}]}).encode()
MISMATCH = "The request signature we calculated does not match"

SCRIPT = {"answers": [
    {"text": "Hello there world", "usage": [7, 5]},
    {"reasoning": "Think", "text": "Ok", "piece_chars": 2,
     "tool_uses": [{"id": "tooluse_1", "name": "f", "input": {"a": 1}}]},
    {"match": "EXPLODE", "text": "Partial", "no_metadata": True,
     "no_stop": True,
     "exception": {"type": "modelStreamErrorException", "message": "boom"}},
    {"match": "THROTTLE", "status": 429, "error_type": "ThrottlingException",
     "message": "slow down"},
    {"match": "SLICED", "text": "abcdefghijklmnopqrstuvwxyz",
     "writes": "bytes:1-7", "seed": 3},
    {"match": "CUT", "text": "abcdefgh", "cut_after": 2},
    {"match": "SLOW", "text": "ab", "writes": "whole",
     "first_byte_delay_ms": 100, "hold_ms": 100},
    {"match": "PACED", "text": "abcd", "piece_chars": 1, "delay_ms": 30},
]}


def delta(index: int, value: dict[str, Any]) -> list[Any]:
    return ["contentBlockDelta", {"contentBlockIndex": index, "delta": value}]


GREETING = [
    ["messageStart", {"role": "assistant"}],
    delta(0, {"text": "Hell"}), delta(0, {"text": "o th"}),
    delta(0, {"text": "ere "}), delta(0, {"text": "worl"}),
    delta(0, {"text": "d"}),
    ["contentBlockStop", {"contentBlockIndex": 0}],
    ["messageStop", {"stopReason": "end_turn"}],
    ["metadata", {"usage": {"inputTokens": 7, "outputTokens": 5,
                            "totalTokens": 12}, "metrics": {"latencyMs": 1}}]]
TOOLS = [
    ["messageStart", {"role": "assistant"}],
    delta(0, {"reasoningContent": {"text": "Th"}}),
    delta(0, {"reasoningContent": {"text": "in"}}),
    delta(0, {"reasoningContent": {"text": "k"}}),
    delta(0, {"reasoningContent": {
        "signature": "sig-" + hashlib.sha256(b"Think").hexdigest()[:16]}}),
    ["contentBlockStop", {"contentBlockIndex": 0}],
    delta(1, {"text": "Ok"}),
    ["contentBlockStop", {"contentBlockIndex": 1}],
    ["contentBlockStart", {"contentBlockIndex": 2, "start": {
        "toolUse": {"toolUseId": "tooluse_1", "name": "f"}}}],
    delta(2, {"toolUse": {"input": '{"'}}),
    delta(2, {"toolUse": {"input": 'a"'}}),
    delta(2, {"toolUse": {"input": ': '}}),
    delta(2, {"toolUse": {"input": '1}'}}),
    ["contentBlockStop", {"contentBlockIndex": 2}],
    ["messageStop", {"stopReason": "tool_use"}],
    ["metadata", {"usage": {"inputTokens": 10, "outputTokens": 5,
                            "totalTokens": 15}, "metrics": {"latencyMs": 1}}]]


class Server:
    """bedrock_upstream.py in a subprocess, with its script and record."""

    def __init__(self, *extra: str) -> None:
        self.dir = tempfile.TemporaryDirectory()
        script = os.path.join(self.dir.name, "script.json")
        with open(script, "w", encoding="utf-8") as handle:
            json.dump(SCRIPT, handle)
        self.record = os.path.join(self.dir.name, "record.jsonl")
        self.proc = subprocess.Popen(
            [sys.executable, SERVER, "--script", script, "--record",
             self.record, *extra], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        self.host = line.strip().removeprefix("listening on http://")

    def records(self) -> list[dict[str, Any]]:
        with open(self.record, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    def stop(self) -> tuple[int, str]:
        """Exit code and stderr after SIGTERM."""
        self.proc.terminate()
        _, stderr = self.proc.communicate(timeout=5)
        self.dir.cleanup()
        return self.proc.returncode, stderr


class NoExclusions(SigV4Auth):
    """A signer that also signs headers botocore normally leaves out."""

    def headers_to_sign(self, request: AWSRequest) -> Any:
        headers = super().headers_to_sign(request)
        headers["connection"] = request.headers["connection"]
        return headers


class SingleEncoded(SigV4Auth):
    """A signer that wrongly uses the path as sent (no double encoding)."""

    def _normalize_url_path(self, path: str) -> str:
        return path


def sign(host: str, body: bytes = BODY, *, secret: str = SECRET,
         token: str | None = None, region: str = "us-east-1",
         path: str = PATH, method: str = "POST",
         extra: dict[str, str] | None = None,
         signer: type[SigV4Auth] = SigV4Auth,
         length: bool = True) -> dict[str, str]:
    """The headers of a request signed with botocore's SigV4Auth.add_auth."""
    headers = {"host": host, "content-type": "application/json",
               "x-test": "signed", **(extra or {})}
    if length:
        headers["content-length"] = str(len(body))
    request = AWSRequest(method, f"http://{host}{path}", headers=headers,
                         data=body)
    credentials = Credentials(AKID, secret, token)
    signer(credentials, "bedrock", region).add_auth(request)
    return dict(request.headers.items())


def decode(raw: bytes) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Frames as (headers, payload without "p"), CRCs checked by botocore."""
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    frames = []
    for message in buffer:
        payload = json.loads(message.payload)
        if message.headers[":message-type"] == "event":
            padding = payload.pop("p")
            assert padding.isalpha(), padding
        frames.append((message.headers, payload))
    assert not buffer._data, "trailing bytes after the last frame"
    return frames


def events(raw: bytes) -> list[list[Any]]:
    out = []
    for headers, payload in decode(raw):
        if headers[":message-type"] == "event":
            assert headers[":content-type"] == "application/json"
            out.append([headers[":event-type"], payload])
        else:
            out.append([headers[":message-type"],
                        headers[":exception-type"], payload])
    return out


class UpstreamTest(unittest.TestCase):
    server: Server
    token_server: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server()
        cls.token_server = Server("--session-token", TOKEN)

    @classmethod
    def tearDownClass(cls) -> None:
        for server in (cls.server, cls.token_server):
            assert server.stop() == (0, ""), "quiet exit 0 on SIGTERM"

    def send(self, headers: dict[str, str], body: bytes = BODY,
             method: str = "POST", path: str = PATH,
             server: Server | None = None) -> tuple[int, Any, bytes]:
        conn = http.client.HTTPConnection((server or self.server).host,
                                          timeout=5)
        try:
            conn.request(method, path, body, headers)
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()

    def assert_error(self, result: tuple[int, Any, bytes], status: int,
                     error_type: str, message: str) -> None:
        code, headers, body = result
        self.assertEqual(code, status, body)
        self.assertEqual(headers["x-amzn-ErrorType"].split(":")[0], error_type)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertTrue(headers["x-amzn-RequestId"])
        self.assertIn(message, json.loads(body)["message"])

    def test_signed_request_streams_events(self) -> None:
        code, headers, body = self.send(sign(self.server.host))
        self.assertEqual(code, 200, body)
        self.assertEqual(headers["content-type"],
                         "application/vnd.amazon.eventstream")
        self.assertIn(events(body), (GREETING, TOOLS))
        record = self.server.records()[-1]
        self.assertEqual(record["model"], MODEL)
        self.assertEqual(record["path"], PATH)
        self.assertEqual(record["signature"], "ok")
        self.assertIn(record["answer"], (0, 1))
        self.assertEqual(record["body"], json.loads(BODY))
        self.assertIn("/model/anthropic.claude-3-5-sonnet-20240620-v1%253A0/",
                      record["canonical_request"])
        self.assertRegex(record["headers"]["authorization"], r"Signature=…$")

    def test_keep_alive_and_answers_in_turn(self) -> None:
        conn = http.client.HTTPConnection(self.server.host, timeout=5)
        seen, sockets = [], set()
        for _ in range(4):
            conn.request("POST", PATH, BODY, sign(self.server.host))
            response = conn.getresponse()
            self.assertEqual(response.status, 200)
            seen.append(events(response.read()))
            sockets.add(id(conn.sock))
        conn.close()
        self.assertEqual(len(sockets), 1, "one connection for all requests")
        self.assertIn(seen[:2], ([GREETING, TOOLS], [TOOLS, GREETING]))
        self.assertEqual(seen[2:], seen[:2])

    def test_match_exception_frame(self) -> None:
        body = b'{"x": "EXPLODE"}'
        code, _, raw = self.send(sign(self.server.host, body), body)
        self.assertEqual(code, 200)
        self.assertEqual(events(raw)[-2:], [
            ["contentBlockStop", {"contentBlockIndex": 0}],
            ["exception", "modelStreamErrorException", {"message": "boom"}]])

    def test_match_error_status(self) -> None:
        body = b'{"x": "THROTTLE"}'
        self.assert_error(self.send(sign(self.server.host, body), body),
                          429, "ThrottlingException", "slow down")
        self.assertEqual(self.server.records()[-1]["answer"], 3)

    def raw_exchange(self, marker: str) -> tuple[bytes, list[int], bytes]:
        """(response head, chunk sizes, body) read off a raw socket."""
        body = json.dumps({"x": marker}).encode()
        request = [f"POST {PATH} HTTP/1.1"]
        request += [f"{k}: {v}"
                    for k, v in sign(self.server.host, body).items()]
        request += ["connection: close", "", ""]
        host, port = self.server.host.split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall("\r\n".join(request).encode() + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        self.assertIn(b"transfer-encoding: chunked", head)
        sizes, stream = [], b""
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                self.assertEqual(rest, b"\r\n")
                return head, sizes, stream
            sizes.append(size)
            self.assertEqual(rest[size:size + 2], b"\r\n")
            stream, rest = stream + rest[:size], rest[size + 2:]

    def test_byte_sliced_writes(self) -> None:
        _, sizes, stream = self.raw_exchange("SLICED")
        self.assertTrue(all(1 <= s <= 7 for s in sizes), sizes)
        texts = [e[1]["delta"]["text"] for e in events(stream)
                 if e[0] == "contentBlockDelta"]
        self.assertEqual("".join(texts), "abcdefghijklmnopqrstuvwxyz")

    def test_whole_write_and_delays(self) -> None:
        started = time.monotonic()
        _, sizes, stream = self.raw_exchange("SLOW")
        self.assertGreaterEqual(time.monotonic() - started, 0.2)
        self.assertEqual(len(sizes), 1)
        self.assertEqual(len(events(stream)), 5)
        started = time.monotonic()
        _, sizes, stream = self.raw_exchange("PACED")
        self.assertGreaterEqual(time.monotonic() - started, 7 * 0.03)
        self.assertEqual(len(sizes), 8, "one write per frame")

    def test_concurrent_connections(self) -> None:
        def slow(_: int) -> int:
            body = b'{"x": "SLOW"}'
            return self.send(sign(self.server.host, body), body)[0]

        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            self.assertEqual(list(pool.map(slow, range(8))), [200] * 8)
        self.assertLess(time.monotonic() - started, 1.2)

    def test_script_error_exits_2(self) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as script:
            json.dump({"answers": [{"writes": "bytes:5-2"}]}, script)
            script.flush()
            done = subprocess.run([sys.executable, SERVER, "--script",
                                   script.name], capture_output=True,
                                  text=True, timeout=10)
        self.assertEqual(done.returncode, 2)
        self.assertIn("answers[0].writes", done.stderr)
        self.assertEqual(done.stdout, "")

    def test_cut_after(self) -> None:
        body = b'{"x": "CUT"}'
        with self.assertRaises(http.client.IncompleteRead):
            self.send(sign(self.server.host, body), body)

    def test_chunked_request_body(self) -> None:
        headers = sign(self.server.host, length=False)
        conn = http.client.HTTPConnection(self.server.host, timeout=5)
        conn.request("POST", PATH, iter([BODY[:5], BODY[5:]]), headers,
                     encode_chunked=True)
        response = conn.getresponse()
        self.assertEqual(response.status, 200, response.read())
        response.read()
        conn.close()
        self.assertEqual(self.server.records()[-1]["body"], json.loads(BODY))

    def test_unsigned_header_may_change(self) -> None:
        headers = sign(self.server.host)
        headers["user-agent"] = "changed-after-signing"
        self.assertEqual(self.send(headers)[0], 200)

    def test_client_signed_header_botocore_excludes(self) -> None:
        headers = sign(self.server.host, extra={"connection": "keep-alive"},
                       signer=NoExclusions)
        self.assertIn("connection", headers["Authorization"])
        self.assertEqual(self.send(headers)[0], 200)

    def test_rejections(self) -> None:
        host = self.server.host
        stale = (datetime.now(timezone.utc).replace(tzinfo=None)
                 - timedelta(minutes=6))
        with mock.patch("botocore.auth.get_current_datetime",
                        return_value=stale):
            stale_headers = sign(host)
        tampered = sign(host)
        tampered["x-test"] = "changed"
        cases = {
            "no auth": ({"content-type": "application/json"}, BODY, 403,
                        "MissingAuthenticationTokenException",
                        "Missing Authentication Token"),
            "body byte": (sign(host), BODY.replace(b"hi", b"ho"), 403,
                          "InvalidSignatureException", MISMATCH),
            "secret": (sign(host, secret=SECRET[:-1] + "X"), BODY, 403,
                       "InvalidSignatureException", MISMATCH),
            "region": (sign(host, region="us-west-2"), BODY, 403,
                       "InvalidSignatureException", "valid region"),
            "signed header": (tampered, BODY, 403,
                              "InvalidSignatureException", MISMATCH),
            "stale": (stale_headers, BODY, 403, "InvalidSignatureException",
                      "Signature expired"),
            "single encoded": (sign(host, signer=SingleEncoded), BODY, 403,
                               "InvalidSignatureException", MISMATCH),
            "token sent": (sign(host, token=TOKEN), BODY, 403,
                           "UnrecognizedClientException", "security token"),
            "content sha": (
                sign(host, extra={"x-amz-content-sha256": "0" * 64}), BODY,
                403, "InvalidSignatureException", "x-amz-content-sha256"),
        }
        for name, (headers, body, status, kind, message) in cases.items():
            with self.subTest(name):
                self.assert_error(self.send(headers, body), status, kind,
                                  message)
        with open(self.server.record, encoding="utf-8") as handle:
            self.assertNotIn(SECRET, handle.read())

    def test_wrong_access_key(self) -> None:
        headers = sign(self.server.host)
        headers["Authorization"] = headers["Authorization"].replace(
            AKID, "AKIDOTHER")
        self.assert_error(self.send(headers), 403,
                          "UnrecognizedClientException", "security token")

    def test_routes(self) -> None:
        path = "/model/m/converse"
        self.assert_error(self.send(sign(self.server.host, path=path),
                                    path=path),
                          404, "UnknownOperationException", "No route")
        self.assert_error(self.send(sign(self.server.host, b"", method="PUT"),
                                    b"", method="PUT"),
                          405, "UnknownOperationException", "not allowed")

    def test_session_token(self) -> None:
        server = self.token_server
        code, _, _ = self.send(sign(server.host, token=TOKEN), server=server)
        self.assertEqual(code, 200)
        self.assert_error(self.send(sign(server.host), server=server), 403,
                          "UnrecognizedClientException", "security token")
        self.assert_error(self.send(sign(server.host, token="other"),
                                    server=server), 403,
                          "UnrecognizedClientException", "security token")
        records = server.records()
        self.assertEqual(records[0]["headers"]["x-amz-security-token"], "…")
        with open(server.record, encoding="utf-8") as handle:
            self.assertNotIn(TOKEN, handle.read())


if __name__ == "__main__":
    unittest.main()
