#!/usr/bin/env python3
"""Writes the arithmetic model (arith-6m) as a GGUF for llama.cpp's server, and checks it.

    python scripts/arith-gguf.py write --source DIR [--out models/arith-6m-f16.gguf] [--type f16|q8_0]
    python scripts/arith-gguf.py check [--gguf models/arith-6m-f16.gguf] [--reference FILE] [--tolerance 0.1]

`write` reads DIR/model.safetensors (float32; a reader of its own, numpy only), DIR/config.json
and DIR/vocab.json, and writes llama.cpp's `gptneox` graph: parallel residual off, rope over
the full head dimension (NeoX style, theta from the config), LayerNorm eps from the config, the
fused qkv weight as it is ([q of all heads | k | v]), and zero biases for the Linear layers that
have none (the loader requires them). The tokenizer is `gpt2` with the 20 tokens in byte-level
form (space as U+0120, newline as U+010A), `<pad>`/`<bos>`/`<eos>` as control tokens and one
merge that can never fire (`<pad> <pad>`: llama.cpp refuses a `gpt2` vocabulary without merges,
and the `gguf` package drops an empty list), add-bos on, add-eos off. The chat template writes
the last user message, trimmed, with `=` added when it does not end with one, then a newline
(`<bos>` comes from add-bos). Matrices are F16 (or Q8_0), vectors F32. Nothing in the file
depends on the time or the machine: the same inputs give the same bytes.

`check` starts llama.cpp's own server (scripts/llama_server.py, xllamacpp as installed by
scripts/llama-server.sh) on 127.0.0.1 with the GGUF, one slot, and compares it with the
reference (PyTorch's greedy continuation of 20 held-out prompts, with the top-5 ids and
log-probabilities at each step):

- tokenization: `/tokenize` of each prompt (with `<bos>`) equals the reference's ids, and the
  chat template applied to the bare expression gives the same prompt (`/apply-template`);
- greedy output: `/v1/chat/completions` at temperature 0 with `logprobs`, `top_logprobs: 5`,
  gives the reference's tokens (ids, `<eos>` included);
- log-probabilities: at each step of the greedy output, every top-5 token of the reference that
  the server also ranks in its top 5 has a log-probability within the tolerance, and the two
  top-1 tokens agree.

Exit status 0 when all three hold for every prompt; prints the figures either way. Needs the
`gguf` and `numpy` packages (PyPI) for `write`; `check` needs only the standard library and
the xllamacpp venv.
"""

import argparse
import json
import os
import pathlib
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
LLAMA_DIR = pathlib.Path(os.environ.get("CHOICEWISE_LLAMA_DIR", REPO / ".llama"))
DEFAULT_GGUF = REPO / "models" / "arith-6m-f16.gguf"
DEFAULT_REFERENCE = REPO / "models" / "arith-6m-reference.json"
MAX_BYTES = 13_000_000

# The last user message, trimmed, `=` appended when missing, then a newline. No `<bos>`:
# add-bos writes it.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(text='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{%- set ns.text = message['content'] | trim -%}{%- endif -%}"
    "{%- endfor -%}"
    "{{- ns.text -}}"
    "{%- if ns.text[-1:] != '=' -%}{{- '=' -}}{%- endif -%}"
    "{{- '\\n' -}}"
)


def read_safetensors(path):
    """The tensors of a safetensors file as float32 numpy arrays, by name."""
    import numpy as np

    dtypes = {"F32": np.float32, "F16": np.float16}
    data = pathlib.Path(path).read_bytes()
    if len(data) < 8:
        sys.exit(f"{path}: not a safetensors file (shorter than its header length)")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8:
        sys.exit(f"{path}: header length {header_len} beyond the file's {len(data)} bytes")
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in dtypes:
            sys.exit(f"{path}: tensor {name} has dtype {info['dtype']}; F32 or F16 expected")
        start, end = info["data_offsets"]
        array = np.frombuffer(data[base + start:base + end], dtype=dtypes[info["dtype"]])
        tensors[name] = array.reshape(info["shape"]).astype(np.float32)
    return tensors


def byte_level(text):
    """A token's text in GPT-2's byte-level form (the characters this vocabulary has)."""
    return text.replace(" ", "\u0120").replace("\n", "\u010a")


def write(args):
    import gguf
    import numpy as np

    source = pathlib.Path(args.source)
    config = json.loads((source / "config.json").read_text())
    vocab_map = json.loads((source / "vocab.json").read_text())
    vocab = [vocab_map[str(i)] for i in range(len(vocab_map))]
    weights = read_safetensors(source / "model.safetensors")
    n_layer, d_model, n_head = config["n_layer"], config["d_model"], config["n_head"]
    head_dim, d_ff = config["head_dim"], config["d_ff"]
    if config.get("linear_bias") or config.get("tied_embeddings"):
        sys.exit("config.json: linear biases or tied embeddings are not what this converter writes")

    if args.type == "f16":
        file_type, matrix_type = gguf.LlamaFileType.MOSTLY_F16, gguf.GGMLQuantizationType.F16
    else:
        file_type, matrix_type = gguf.LlamaFileType.MOSTLY_Q8_0, gguf.GGMLQuantizationType.Q8_0

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), "gptneox")
    writer.add_name("arith-6m")
    writer.add_file_type(int(file_type))
    writer.add_context_length(config["context"])
    writer.add_embedding_length(d_model)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(d_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(config["rope_theta"]))
    writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
    writer.add_parallel_residual(False)

    control = {"<pad>", "<bos>", "<eos>"}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list([t if t in control else byte_level(t) for t in vocab])
    writer.add_token_types([
        gguf.TokenType.CONTROL if t in control else gguf.TokenType.NORMAL for t in vocab
    ])
    writer.add_token_merges(["<pad> <pad>"])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    def matrix(name, array):
        if matrix_type == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, array.astype(np.float16))
        else:
            q = gguf.quants.quantize(array, matrix_type)
            writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=matrix_type)

    def vector(name, array):
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    zeros = lambda n: np.zeros(n, dtype=np.float32)
    matrix("token_embd.weight", weights["emb.weight"])
    for i in range(n_layer):
        b, w = f"blk.{i}", lambda n: weights[f"blocks.{i}.{n}"]
        vector(f"{b}.attn_norm.weight", w("ln1.weight"))
        vector(f"{b}.attn_norm.bias", w("ln1.bias"))
        matrix(f"{b}.attn_qkv.weight", w("qkv.weight"))
        vector(f"{b}.attn_qkv.bias", zeros(3 * d_model))
        matrix(f"{b}.attn_output.weight", w("proj.weight"))
        vector(f"{b}.attn_output.bias", zeros(d_model))
        vector(f"{b}.ffn_norm.weight", w("ln2.weight"))
        vector(f"{b}.ffn_norm.bias", w("ln2.bias"))
        matrix(f"{b}.ffn_up.weight", w("fc.weight"))
        vector(f"{b}.ffn_up.bias", zeros(d_ff))
        matrix(f"{b}.ffn_down.weight", w("fc2.weight"))
        vector(f"{b}.ffn_down.bias", zeros(d_model))
    vector("output_norm.weight", weights["lnf.weight"])
    vector("output_norm.bias", weights["lnf.bias"])
    matrix("output.weight", weights["head.weight"])

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    size = out.stat().st_size
    print(f"wrote {out} ({size:,} bytes, {args.type})")
    if size > MAX_BYTES:
        print(f"{out} is over {MAX_BYTES:,} bytes: write --type q8_0 instead", file=sys.stderr)
        return 1
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body, timeout=120):
    request = urllib.request.Request(
        f"{base}{path}", data=json.dumps(body).encode(),
        headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"POST {path}: {e.code} {e.read().decode(errors='replace')}")


def start_server(python, gguf_path):
    port = free_port()
    LLAMA_DIR.mkdir(exist_ok=True)
    log = open(LLAMA_DIR / "arith-check.log", "w")
    server = subprocess.Popen(
        [python, str(REPO / "scripts" / "llama_server.py"), "--model", str(gguf_path),
         "--port", str(port), "--parallel", "1", "--ctx", "192", "--alias", "arith-6m",
         "--threads", "1"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the llama.cpp server exited; see {log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    server.kill()
    sys.exit(f"the llama.cpp server did not become healthy in 60 s; see {log.name}")


def check(args):
    reference = json.loads(pathlib.Path(args.reference).read_text())
    problems = reference["problems"]
    vocab = reference["vocab"]
    python = LLAMA_DIR / "venv" / "bin" / "python"
    if not args.server and not python.exists():
        sys.exit("run scripts/llama-server.sh install first, or pass --server")
    if args.server:
        server, base = None, args.server.rstrip("/").removesuffix("/v1")
    else:
        server, base = start_server(str(python), args.gguf)
    token_ok = template_ok = greedy_ok = 0
    worst, worst_at, compared, top1_disagree = 0.0, None, 0, 0
    began = time.monotonic()
    try:
        for n, p in enumerate(problems):
            ids = post(base, "/tokenize", {"content": p["prompt"], "add_special": True})["tokens"]
            token_ok += ids == p["prompt_ids"]
            applied = post(base, "/apply-template",
                           {"messages": [{"role": "user", "content": p["expr"]}]})["prompt"]
            template_ok += applied == p["prompt"]
            out = post(base, "/v1/chat/completions", {
                "messages": [{"role": "user", "content": p["expr"]}],
                "temperature": 0, "max_tokens": 175, "logprobs": True, "top_logprobs": 5,
                "seed": 0,
            })
            steps = out["choices"][0]["logprobs"]["content"]
            got = [s["id"] for s in steps]
            want = [s["id"] for s in p["steps"]]
            same = got == want
            greedy_ok += same
            if not same:
                text = "".join(vocab[i] for i in got if i > 2)
                print(f"problem {n} ({p['expr']}): greedy differs: {text!r} vs {p['text']!r}",
                      file=sys.stderr)
            for k, (mine, theirs) in enumerate(zip(steps, p["steps"])):
                served = {t["id"]: t["logprob"] for t in mine["top_logprobs"]}
                if mine["top_logprobs"][0]["id"] != theirs["top_ids"][0]:
                    top1_disagree += 1
                for tid, lp in zip(theirs["top_ids"], theirs["top_logprobs"]):
                    if tid in served:
                        compared += 1
                        diff = abs(served[tid] - lp)
                        if diff > worst:
                            worst, worst_at = diff, (n, k, tid)
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
    total = len(problems)
    logprobs_ok = worst <= args.tolerance and top1_disagree == 0
    print(f"{args.gguf if not args.server else base}: {total} reference prompts, "
          f"{time.monotonic() - began:.1f} s")
    print(f"tokenization equal {token_ok}/{total}; chat template gives the prompt {template_ok}/{total}")
    print(f"greedy output equal {greedy_ok}/{total}")
    print(f"top-5 log-probabilities: {compared} compared, largest difference {worst:.4f} "
          f"(problem, step, token {worst_at}), tolerance {args.tolerance}; top-1 differs at "
          f"{top1_disagree} steps")
    ok = token_ok == template_ok == greedy_ok == total and logprobs_ok
    print("check passed" if ok else "check FAILED")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the GGUF from the safetensors model")
    w.add_argument("--source", required=True,
                   help="the model's directory: model.safetensors, config.json, vocab.json")
    w.add_argument("--out", default=str(DEFAULT_GGUF))
    w.add_argument("--type", choices=["f16", "q8_0"], default="f16",
                   help="the matrices' type (vectors stay F32)")
    c = sub.add_parser("check", help="serve the GGUF and compare it with the reference")
    c.add_argument("--gguf", default=str(DEFAULT_GGUF))
    c.add_argument("--reference", default=str(DEFAULT_REFERENCE))
    c.add_argument("--tolerance", type=float, default=0.1,
                   help="largest difference of a top-5 log-probability (natural log)")
    c.add_argument("--server", metavar="URL",
                   help="a running llama.cpp server with the GGUF (http://HOST:PORT[/v1])")
    args = parser.parse_args()
    return write(args) if args.command == "write" else check(args)


if __name__ == "__main__":
    sys.exit(main())
