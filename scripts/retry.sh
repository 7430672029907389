# Sourced by the install scripts: `retry ATTEMPTS COMMAND [ARG...]` runs COMMAND until it
# succeeds, at most ATTEMPTS times, waiting 10 s, then 20 s, ... between attempts. A package
# registry that drops a connection or answers 5xx once should cost a retry, not a CI run. Each
# failed attempt says so on stderr with the command's exit code; the command's own output (npm
# with --loglevel=error, pip with --quiet) says why.
retry() {
  local attempts=$1 attempt rc
  shift
  for ((attempt = 1; ; attempt++)); do
    rc=0
    "$@" || rc=$?
    if ((rc == 0)); then
      return 0
    fi
    if ((attempt >= attempts)); then
      printf 'retry: %s failed %s times (last exit %s)\n' "$1" "$attempts" "$rc" >&2
      return "$rc"
    fi
    printf 'retry: %s failed (exit %s), attempt %s of %s; again in %s s\n' \
      "$1" "$rc" "$attempt" "$attempts" "$((10 * attempt))" >&2
    sleep "$((10 * attempt))"
  done
}
