"""Episode boundary rules of formats.md §1.4 on flag arrays, without files."""

from __future__ import annotations

import numpy as np

from episodata_d4rl._boundaries import END_REASONS, find_episodes, plan_episodes
from episodata_d4rl._write import batches


def _flags(n, rows):
    flags = np.zeros(n, dtype=bool)
    flags[list(rows)] = True
    return flags


def _split(n, term=(), tout=(), *, use_terminals=True, step_limit=None, mismatch=None):
    episodes = find_episodes(
        _flags(n, term),
        _flags(n, tout),
        use_terminals=use_terminals,
        step_limit=step_limit,
        mismatch=None if mismatch is None else _flags(n, mismatch),
    )
    reasons = [END_REASONS[r] for r in episodes.reason]
    return list(zip(episodes.start.tolist(), episodes.end.tolist(), reasons, strict=True))


def test_terminals_timeouts_and_the_file_end():
    assert _split(12, term=[3], tout=[8]) == [
        (0, 3, "terminal"),
        (4, 8, "timeout"),
        (9, 11, "file_end"),
    ]


def test_a_flag_on_the_last_row_is_no_file_end():
    assert _split(4, tout=[3]) == [(0, 3, "timeout")]


def test_the_step_limit_restarts_at_every_episode_start():
    # M = 4 and a terminal at 5: rows 0-3 (limit), 4-5 (terminal), 6-9 (limit)
    assert _split(10, term=[5], step_limit=4) == [
        (0, 3, "step_limit"),
        (4, 5, "terminal"),
        (6, 9, "step_limit"),
    ]
    assert _split(11, step_limit=4)[-1] == (8, 10, "file_end")


def test_the_first_rule_names_the_end():
    episodes = find_episodes(
        _flags(6, [2]), _flags(6, [2]), use_terminals=True, step_limit=None, mismatch=None
    )
    assert END_REASONS[episodes.reason[0]] == "terminal"
    assert episodes.source_terminated[0]
    assert episodes.source_truncated[0]


def test_maze_profiles_ignore_terminals():
    assert _split(6, term=[1], tout=[3], use_terminals=False) == [
        (0, 3, "timeout"),
        (4, 5, "file_end"),
    ]


def test_next_observation_mismatch_ends_episodes():
    assert _split(6, mismatch=[1]) == [(0, 1, "next_obs_mismatch"), (2, 5, "file_end")]


def test_plan_case_b_drops_one_step_and_never_terminates():
    episodes = find_episodes(
        _flags(5, [1]), _flags(5, []), use_terminals=True, step_limit=None, mismatch=None
    )
    plan = plan_episodes(
        episodes,
        num_rows=5,
        case_a=False,
        maze2d=False,
        keep_final_partial=True,
        min_transitions=1,
    )
    assert plan.transitions.tolist() == [1, 2]
    assert plan.terminated.tolist() == [False, False]
    assert plan.truncated.tolist() == [True, True]


def test_plan_maze2d_continues_into_the_next_row():
    episodes = find_episodes(
        _flags(6, []), _flags(6, [2]), use_terminals=False, step_limit=None, mismatch=None
    )
    plan = plan_episodes(
        episodes, num_rows=6, case_a=False, maze2d=True, keep_final_partial=True, min_transitions=1
    )
    assert plan.final.tolist() == ["next_row_continuous", "dropped"]
    assert plan.transitions.tolist() == [3, 2]


def test_batches_respect_the_budget_and_keep_large_episodes_whole():
    first = np.array([0, 4, 9, 30])
    last = np.array([3, 8, 29, 31])
    runs = list(batches(first, last, row_bytes=10, budget=100))
    assert runs == [(0, 2), (2, 3), (3, 4)]  # rows 0-8 fit; episode 9-29 exceeds alone
