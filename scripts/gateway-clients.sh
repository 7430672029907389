#!/usr/bin/env bash
# The official OpenAI and Anthropic clients, for the gateway's client tests
# (crates/gateway/tests/clients.rs): openai-python, the OpenAI Agents SDK and anthropic-python
# from PyPI into one venv, openai-node and the Anthropic TypeScript SDK from npm into one
# prefix, all under .clients/ (or CHOICEWISE_CLIENTS_DIR).
#
#   scripts/gateway-clients.sh install
#   cargo test -p choicewise-gateway --test clients -- --ignored
#
# Pinned, so that a new client release changes nothing here until someone moves the pin.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${CHOICEWISE_CLIENTS_DIR:-$repo/.clients}

OPENAI_PYTHON=openai==3.54.0
OPENAI_NODE=openai@6.49.0
ANTHROPIC_PYTHON=anthropic==2.14.0
OPENAI_AGENTS=openai-agents==0.24.0
ANTHROPIC_NODE=@anthropic-ai/sdk@1.14.0

case "${1:-}" in
  install)
    mkdir -p "$dir/node"
    if [[ ! -x $dir/venv/bin/python ]]; then
      "${PYTHON:-python3}" -m venv "$dir/venv"
    fi
    "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      "$OPENAI_PYTHON" "$ANTHROPIC_PYTHON" "$OPENAI_AGENTS"
    npm install --silent --no-audit --no-fund --prefix "$dir/node" "$OPENAI_NODE" "$ANTHROPIC_NODE"
    printf 'gateway-clients.sh: installed %s, %s, %s (%s) and %s, %s (node %s) in %s\n' \
      "$OPENAI_PYTHON" "$ANTHROPIC_PYTHON" "$OPENAI_AGENTS" "$("$dir/venv/bin/python" --version)" \
      "$OPENAI_NODE" "$ANTHROPIC_NODE" "$(node --version)" "$dir" >&2
    ;;
  *)
    echo "usage: scripts/gateway-clients.sh install" >&2
    exit 2
    ;;
esac
