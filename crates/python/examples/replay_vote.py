"""A plain script (no event loop): a recorded n > 1 stream, each choice's text, a vote, the
usage and the errors by kind.

    python replay_vote.py tests/fixtures/demo.sse

``mypy --strict`` checks this file (scripts/python.sh test).
"""

import sys
from typing import Dict, List

import choicewise


def main(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    completions = choicewise.Completions(data)

    texts: Dict[int, str] = {}
    for choice in completions.choices():  # in order of first appearance
        texts[choice.index] = "".join(choice.content())
    for index in sorted(texts):
        print(f"[choice {index}] {texts[index]!r}")

    # Every choice votes with the pattern's first group; a key needs 2 votes to win.
    winner: choicewise.Selection = completions.vote(r"(\w+)", min_votes=1, keep_rest=True)
    if winner:
        print(f"vote: {winner.key!r} with {winner.votes} of {winner.counted}")
    else:
        print(f"no winner: {winner.reason}")

    try:
        whole = completions.collect()  # openai's ChatCompletion
    except choicewise.UpstreamError as e:  # the provider said so in the stream
        print(f"upstream error at line {e.line}: {e}", file=sys.stderr)
        return 1
    except choicewise.ChoicewiseError as e:  # any other kind: e.kind names it
        print(f"{type(e).__name__} ({e.kind}): {e}", file=sys.stderr)
        return 1
    reasons: List[str] = [c.finish_reason for c in whole.choices]
    print("finish reasons:", reasons)

    usage: choicewise.Usage = completions.usage()  # openai's CompletionUsage, plus source
    print(f"usage ({usage.source}): {usage.total_tokens} tokens")

    first = completions.choice(0)
    if first is not None:
        message: choicewise.ChoiceOutput = first.message()
        print("choice 0:", message["finish_reason"], message["message"]["content"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
