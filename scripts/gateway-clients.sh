#!/usr/bin/env bash
# The official OpenAI, Anthropic and Google clients, for the gateway's client tests
# (crates/gateway/tests/gateway/clients.rs): openai-python, the OpenAI Agents SDK, anthropic-python
# and google-genai from PyPI into one venv, openai-node, the Anthropic TypeScript SDK and the Vercel AI SDK
# (ai with its OpenAI provider, whose default model speaks Responses) from npm into one
# prefix, all under .clients/ (or CHOICEWISE_CLIENTS_DIR).
#
#   scripts/gateway-clients.sh install
#   cargo test -p choicewise-gateway --test gateway -- --ignored clients::
#
# Pinned, so that a new client release changes nothing here until someone moves the pin.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/retry.sh
. "$repo/scripts/retry.sh"
dir=${CHOICEWISE_CLIENTS_DIR:-$repo/.clients}

OPENAI_PYTHON=openai==3.54.0
OPENAI_NODE=openai@6.49.0
ANTHROPIC_PYTHON=anthropic==2.14.0
OPENAI_AGENTS=openai-agents==0.24.0
GOOGLE_GENAI=google-genai==3.6.1
ANTHROPIC_NODE=@anthropic-ai/sdk@1.14.0
# ai 7 needs Node.js 22; the machine's Node.js is 20. zod is the provider's peer dependency.
AI_SDK=ai@5.0.277
AI_SDK_OPENAI=@ai-sdk/openai@2.0.130
ZOD=zod@3.25.76

case "${1:-}" in
  install)
    mkdir -p "$dir/node"
    if [[ ! -x $dir/venv/bin/python ]]; then
      "${PYTHON:-python3}" -m venv "$dir/venv"
    fi
    retry 3 "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      "$OPENAI_PYTHON" "$ANTHROPIC_PYTHON" "$OPENAI_AGENTS" "$GOOGLE_GENAI"
    retry 3 npm install --loglevel=error --no-audit --no-fund --prefix "$dir/node" "$OPENAI_NODE" "$ANTHROPIC_NODE" \
      "$AI_SDK" "$AI_SDK_OPENAI" "$ZOD"
    printf 'gateway-clients.sh: installed %s, %s, %s, %s (%s) and %s, %s, %s, %s (node %s) in %s\n' \
      "$OPENAI_PYTHON" "$ANTHROPIC_PYTHON" "$OPENAI_AGENTS" "$GOOGLE_GENAI" "$("$dir/venv/bin/python" --version)" \
      "$OPENAI_NODE" "$ANTHROPIC_NODE" "$AI_SDK" "$AI_SDK_OPENAI" "$(node --version)" "$dir" >&2
    ;;
  *)
    echo "usage: scripts/gateway-clients.sh install" >&2
    exit 2
    ;;
esac
