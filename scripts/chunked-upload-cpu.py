#!/usr/bin/env python3
"""The gateway's CPU time per KiB of a request body sent in tiny chunks (issue 71).

Starts `choicewise serve` (the binary given, default target/release/choicewise) on a free
loopback port with one model whose upstream is never asked (the request names another
model, so the body is read whole, parsed and refused with a 404), then sends bodies of
`--kib` KiB with `Transfer-Encoding: chunked`, in chunks of each size of `--chunks`
(1 byte: an attacker's worst), every chunk of a body written in one `sendall` so that the
client costs next to nothing. The gateway's CPU time (user + system, from
/proc/PID/stat) over each body, divided by the body's KiB, is printed per chunk size with
the answer's status and code: the median of `--runs` bodies. A body refused before its end
(`body_frames_too_small`) is counted over all the KiB the client sent.

    python3 scripts/chunked-upload-cpu.py --kib 1024 --chunks 1,16,65536 --runs 3
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User plus system CPU seconds of process `pid` (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body_of(kib):
    """A Chat Completions body of about `kib` KiB naming a model that is not configured."""
    filler = "x" * (kib * 1024 - 120)
    return json.dumps(
        {"model": "not-configured", "messages": [{"role": "user", "content": filler}]}
    ).encode()


def chunked(body, size):
    """`body` in chunks of `size` bytes, then the last chunk."""
    parts = []
    for at in range(0, len(body), size):
        piece = body[at : at + size]
        parts.append(b"%x\r\n" % len(piece) + piece + b"\r\n")
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


def send(port, wire):
    """One request with a chunked body already framed as `wire`; the status line."""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n"
        b"connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port)) as s:
        try:
            s.sendall(head + wire)
        except (BrokenPipeError, ConnectionResetError):
            pass  # Refused before the body's end: its answer is read below.
        answer = b""
        while True:
            try:
                got = s.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            answer += got
    status = answer.split(b"\r\n", 1)[0].decode()
    code = answer.split(b'"code":"', 1)[1].split(b'"', 1)[0].decode() if b'"code":"' in answer else ""
    return f"{status} {code}".strip() or "no answer"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default="target/release/choicewise")
    p.add_argument("--kib", type=int, default=1024)
    p.add_argument("--chunks", default="1,16,65536")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    port = free_port()
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write(
        f'listen = "127.0.0.1:{port}"\n[limits]\nmax_body_bytes = {64 << 20}\n'
        '[[models]]\nname = "m"\n[[models.upstreams]]\napi = "chat"\n'
        'base_url = "http://127.0.0.1:9/v1"\nmodel = "up"\n'
    )
    config.close()
    env = dict(os.environ, RUST_LOG="error")
    server = subprocess.Popen(
        [a.binary, "serve", "--config", config.name], env=env, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        body = body_of(a.kib)
        print(f"body {len(body)} bytes; {os.cpu_count()} CPUs")
        for size in [int(c) for c in a.chunks.split(",")]:
            wire = chunked(body, size)
            per_kib = []
            for _ in range(a.runs):
                before = cpu_seconds(server.pid)
                status = send(port, wire)
                time.sleep(0.05)
                spent = cpu_seconds(server.pid) - before
                per_kib.append(spent / (len(body) / 1024) * 1e6)
            print(
                f"chunks of {size:>6} B: {statistics.median(per_kib):8.1f} µs CPU per KiB "
                f"(runs: {', '.join(f'{x:.1f}' for x in per_kib)}; {status})"
            )
    finally:
        server.terminate()
        server.wait()
        os.unlink(config.name)


if __name__ == "__main__":
    sys.exit(main())
