#!/usr/bin/env python3
"""What one call of the limits' script costs Redis, and which part of it.

Replays one `EVALSHA` of the gateway's limits (captured with `redis-cli MONITOR` while a
benchmark ran) COUNT times over one raw RESP connection, each time through the script file
given (the script itself, or a variant cut short), and prints Redis's own time per call
(`INFO commandstats`: `usec_per_call`, the script's nested commands included) beside the
nested commands' own:

    redis-cli -p 6390 MONITOR > monitor.txt &   # then run, for example:
    target/release/choicewise-bench gateway-rate --rounds 1 \\
        --limits redis://127.0.0.1:6390 --rate-secs 3
    scripts/redis-script-cost.py monitor.txt 6390 \\
        crates/gateway/src/quota/redis/counts.lua variant.lua ...

The call replayed is the middle `EVALSHA` of the capture (`--call N`: the Nth). Its counters
are written as the script writes them: use a Redis of its own, never one a gateway counts in.
"""

import argparse
import re
import socket
import time

ESCAPES = {"n": 10, "r": 13, "t": 9, "a": 7, "b": 8, '"': 34, "\\": 92}


def unescaped(text):
    """The bytes of one argument as MONITOR quotes it."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] != "\\":
            out.append(ord(text[i]))
            i += 1
        elif text[i + 1] == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(ESCAPES[text[i + 1]])
            i += 2
    return bytes(out)


def arguments(line):
    """The command and arguments of one MONITOR line."""
    quoted = line.split("] ", 1)[1]
    return [unescaped(a) for a in re.findall(r'"((?:[^"\\]|\\.)*)"', quoted)]


def resp(args):
    """A command in RESP."""
    out = b"*%d\r\n" % len(args)
    for arg in args:
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


class Connection:
    """One connection to Redis, one command at a time."""

    def __init__(self, port):
        self.tcp = socket.create_connection(("127.0.0.1", port))

    def call(self, args):
        """Sends a command and reads its answer (whole: the answers here are small)."""
        self.tcp.sendall(resp(args))
        return self.tcp.recv(1 << 20)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("monitor", help="a redis-cli MONITOR capture")
    parser.add_argument("port", type=int, help="the Redis to replay it on")
    parser.add_argument("scripts", nargs="+", help="the script files to time")
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--call", type=int, help="which EVALSHA of the capture")
    options = parser.parse_args()

    with open(options.monitor, errors="surrogateescape") as capture:
        calls = [line for line in capture if '"EVALSHA"' in line.upper()]
    if not calls:
        raise SystemExit(f"{options.monitor}: no EVALSHA in the capture")
    call = calls[options.call if options.call is not None else len(calls) // 2]
    args = arguments(call)
    redis = Connection(options.port)
    print(f"{len(args) - 3} keys and arguments, {sum(map(len, args[3:]))} bytes")
    for path in options.scripts:
        with open(path, "rb") as script:
            answer = redis.call([b"SCRIPT", b"LOAD", script.read()])
        args[1] = answer.split(b"\r\n")[1]
        redis.call([b"CONFIG", b"RESETSTAT"])
        start = time.monotonic()
        payload = resp(args)
        for _ in range(options.count):
            redis.tcp.sendall(payload)
            redis.tcp.recv(1 << 20)
        elapsed = time.monotonic() - start
        stats = redis.call([b"INFO", b"commandstats"]).decode()
        pattern = r"cmdstat_(\w+):calls=\d+,usec=\d+,usec_per_call=([\d.]+)"
        per_call = {m.group(1): float(m.group(2)) for m in re.finditer(pattern, stats)}
        nested = ", ".join(f"{k} {v:.2f}" for k, v in per_call.items() if k != "evalsha")
        print(
            f"{path}: EVALSHA {per_call.get('evalsha', 0.0):.2f} µs a call "
            f"(round trip {elapsed / options.count * 1e6:.1f} µs); nested, µs each: {nested}"
        )


if __name__ == "__main__":
    main()
