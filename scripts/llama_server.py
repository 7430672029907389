#!/usr/bin/env python3
"""Runs llama.cpp's own HTTP server (through the `xllamacpp` wheel) on 127.0.0.1 until killed.

    python scripts/llama_server.py --model FILE.gguf --port 8080 [--parallel 4] [--ctx 4096]

`xllamacpp.Server(params)` starts llama.cpp's server code (the `llama-server` binary's HTTP
routes: /v1/chat/completions, /v1/models, /health, /slots, /metrics) on a background thread and
returns once it listens. This process then waits for SIGTERM or SIGINT, and exits; the server
dies with it. Used by scripts/llama-server.sh and by the real-server tests, which start a private
one to kill it mid-stream.
"""

import argparse
import signal
import sys
import threading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parallel", type=int, default=4, help="slots: the largest n served")
    parser.add_argument("--ctx", type=int, default=4096, help="context, shared by the slots")
    parser.add_argument("--alias", default="smollm2", help="the model name the server reports")
    parser.add_argument("--threads", type=int, default=0, help="0: llama.cpp's default")
    args = parser.parse_args()

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx
    params.endpoint_slots = True
    params.endpoint_metrics = True
    # Each slot's cache would otherwise make a repeated prompt cheaper than the first one.
    params.cache_prompt = False
    if args.threads > 0:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(params)
    print(f"llama_server: listening on {server.listening_address}", flush=True)
    while not stop.wait(3600):
        pass
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
