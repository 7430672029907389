#!/usr/bin/env bash
# The coding agents, for the gateway's agent tests (crates/gateway/tests/gateway/agents.rs): Claude
# Code, Codex CLI and opencode from npm (each a platform binary in a package of its own), pi and
# Gemini CLI (Node.js), into one prefix under .clients/agents (or CHOICEWISE_AGENTS_DIR).
#
#   scripts/agents.sh install
#   cargo test -p choicewise-gateway --test gateway -- --ignored agents::
#
# Pinned, so that a new agent release changes nothing here until someone moves the pin.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${CHOICEWISE_AGENTS_DIR:-$repo/.clients/agents}
# shellcheck source=scripts/retry.sh
. "$repo/scripts/retry.sh"

CLAUDE_CODE=@anthropic-ai/claude-code@2.1.332
CODEX=@openai/codex@0.169.0
OPENCODE=opencode-ai@1.18.33
PI=@mariozechner/pi-coding-agent@0.73.1
GEMINI_CLI=@google/gemini-cli@0.61.0

case "${1:-}" in
  install)
    mkdir -p "$dir"
    # Claude Code declares Node.js 22 but runs its own binary: npm's engine warning on an
    # older Node.js is harmless.
    retry 3 npm install --loglevel=error --no-audit --no-fund --prefix "$dir" \
      "$CLAUDE_CODE" "$CODEX" "$OPENCODE" "$PI" "$GEMINI_CLI"
    # Each runs here, offline.
    claude=$("$dir/node_modules/.bin/claude" --version)
    codex=$("$dir/node_modules/.bin/codex" --version)
    opencode=$(OPENCODE_DISABLE_AUTOUPDATE=1 "$dir/node_modules/.bin/opencode" --version)
    pi=$(PI_OFFLINE=1 "$dir/node_modules/.bin/pi" --version 2>&1)
    gemini=$("$dir/node_modules/.bin/gemini" --version)
    printf 'agents.sh: installed %s (%s), %s (%s), %s (%s), %s (%s) and %s (%s) in %s\n' \
      "$CLAUDE_CODE" "$claude" "$CODEX" "$codex" "$OPENCODE" "$opencode" "$PI" "$pi" \
      "$GEMINI_CLI" "$gemini" "$dir" >&2
    ;;
  *)
    echo "usage: scripts/agents.sh install" >&2
    exit 2
    ;;
esac
