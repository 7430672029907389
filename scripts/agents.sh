#!/usr/bin/env bash
# The coding agents, for the gateway's agent tests (crates/gateway/tests/agents.rs): Claude
# Code and Codex CLI from npm (each a platform binary in a package of its own), into one prefix
# under .clients/agents (or CHOICEWISE_AGENTS_DIR).
#
#   scripts/agents.sh install
#   cargo test -p choicewise-gateway --test agents -- --ignored
#
# Pinned, so that a new agent release changes nothing here until someone moves the pin.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${CHOICEWISE_AGENTS_DIR:-$repo/.clients/agents}

CLAUDE_CODE=@anthropic-ai/claude-code@2.1.328
CODEX=@openai/codex@0.169.0

case "${1:-}" in
  install)
    mkdir -p "$dir"
    # Claude Code declares Node.js 22 but runs its own binary: npm's engine warning on an
    # older Node.js is harmless.
    npm install --silent --no-audit --no-fund --prefix "$dir" "$CLAUDE_CODE" "$CODEX"
    # Both run here, offline.
    claude=$("$dir/node_modules/.bin/claude" --version)
    codex=$("$dir/node_modules/.bin/codex" --version)
    printf 'agents.sh: installed %s (%s) and %s (%s) in %s\n' \
      "$CLAUDE_CODE" "$claude" "$CODEX" "$codex" "$dir" >&2
    ;;
  *)
    echo "usage: scripts/agents.sh install" >&2
    exit 2
    ;;
esac
