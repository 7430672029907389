"""Selection while the choices stream: vote() and first_finished() decide early and cancel
what is no longer needed (a stalled upstream included)."""

import asyncio

import choicewise


def answer(text: str) -> bytes:
    return (
        f'data: {{"choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":"stop"}}]}}\n\n'
        "data: [DONE]\n\n"
    ).encode()


async def stalled():
    yield b'data: {"choices":[{"index":0,"delta":{"content":"thinking"}}]}\n\n'
    await asyncio.sleep(3600)
    yield b""


def test_vote_decides_early_and_cancels_the_stalled_sample():
    async def main():
        completions = choicewise.Completions.fan_out(
            [answer("Answer: 42"), stalled(), answer("so... Answer: 42"), answer("Answer: 41"), answer("Answer: 42")]
        )
        winner = await asyncio.wait_for(completions.vote(r"Answer: (\d+)"), 10)
        whole = await asyncio.wait_for(completions.collect(), 10)
        stalled_choice = await completions.choice(1)
        return winner, whole, stalled_choice

    winner, whole, stalled_choice = asyncio.run(main())
    # The vote cancelled it, and says so.
    assert stalled_choice.cancel_reason == "decided"
    # 42 has 3 votes, 41 at most one: the stalled sample cannot change the winner. Decided at
    # the third 42, whether 41's vote came before it (4 counted) or not (3): the samples
    # finish in whatever order their tasks run.
    assert (winner.key, winner.votes) == ("42", 3)
    assert winner.counted in (3, 4)
    # The winning key's voters in the order they finished: the first is the answer.
    assert sorted(winner.selected) == [0, 2, 4] and winner.cancelled == [1]
    assert winner.choice.index == winner.selected[0] and winner
    assert "".join(winner.choice.content()).endswith("Answer: 42")
    assert whole.choices[1].finish_reason is None


def test_first_finished_sync_and_min_votes():
    completions = choicewise.Completions.fan_out([answer("a"), answer("b")])
    first = completions.first_finished()
    assert first.selected in ([0], [1]) and first.key is None
    none = choicewise.Completions.fan_out([answer("1"), answer("2")]).vote(r"\d", min_votes=2)
    assert not none and none.choice is None and "no key has 2 votes" in none.reason


def test_one_set_of_defaults_and_a_policy_as_a_dict():
    # A vote needs two votes unless told, as in the CLI and the gateway.
    split = choicewise.Completions.fan_out([answer("1"), answer("2")]).vote(r"\d")
    assert not split and "no key has 2 votes" in split.reason
    plurality = choicewise.Completions.fan_out([answer("1"), answer("2")]).vote(r"\d", min_votes=1)
    assert plurality and plurality.votes == 1
    # The gateway's extension's fields, checked as the gateway checks them.
    picked = choicewise.Completions.fan_out([answer("Answer: 7"), answer("Answer: 7")]).pick(
        {"select": "vote", "vote_by": r"Answer: (\d+)"}
    )
    # The winning key's voters, in the order they finished.
    assert (picked.key, picked.votes, sorted(picked.selected)) == ("7", 2, [0, 1])
    first = choicewise.Completions.fan_out([answer("a"), answer("b")]).pick({"select": "first_finished"})
    assert first.selected in ([0], [1])
    for policy, says in [
        ({"select": "first_finished", "window": 2}, '"window" goes with "select": "vote"'),
        ({"select": "vote", "best": 1}, 'unknown field "best"'),
        (
            {"select": "vote", "confidence": {"measure": "mean"}},
            'unknown "confidence.measure": "mean" (sampled, top_k)',
        ),
    ]:
        try:
            choicewise.Completions.fan_out([answer("1")]).pick(policy)
        except ValueError as e:
            assert says in str(e), str(e)
        else:
            raise AssertionError(f"{policy} was taken")
    try:
        choicewise.Completions.fan_out([answer("1")]).vote(r"\d", min_votes=0)
    except ValueError as e:
        assert "min_votes: must be an integer of 1 or more, not 0" in str(e), str(e)
    else:
        raise AssertionError("min_votes=0 was taken")


def test_cancelling_a_task_reading_a_choice_cancels_that_choice():
    async def main():
        completions = choicewise.Completions.fan_out([stalled(), answer("done")])
        slow = await completions.choice(0)

        async def read():
            return [d async for d in slow.content()]

        task = asyncio.create_task(read())
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        whole = await asyncio.wait_for(completions.collect(), 10)
        return slow, whole

    slow, whole = asyncio.run(main())
    assert slow.cancelled
    assert slow.cancel_reason == "reader_gone"
    assert whole.choices[1].message.content == "done"
