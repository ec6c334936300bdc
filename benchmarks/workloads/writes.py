"""W5: recording CartPole-shaped steps with ``new_episode`` + ``add_step``.

Steps arrive as an environment hands them out (a float32 ``[4]`` array, an int action,
a float reward, two flags), one call per step. One timed call writes one whole episode,
so latencies are per episode; the rate is steps per second. The Zarr dataset makes each
episode durable when it is finalized (fsync on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.data import cartpole_steps
from benchmarks.harness import Opened, Systems
from benchmarks.peers import torchrl_data
from benchmarks.results import Target, WorkloadResult, ratio_target

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks.harness import Context
    from episodata import Dataset, DatasetSchema

__all__ = ["cartpole_schema", "run_w5"]


def cartpole_schema() -> DatasetSchema:
    """Observation float32 ``[4]``, action int64, reward float32: ``CartPole-v1``'s spaces."""
    from episodata import DatasetSchema, FieldSpec

    return DatasetSchema(
        [
            FieldSpec("observation", shape=(4,), dtype="float32"),
            FieldSpec("action", shape=(), dtype="int64", role="action"),
            FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        ]
    )


def _episode_writer(dataset: Dataset, steps: dict[str, Any], count: int) -> Callable[[], None]:
    obs, actions, rewards = steps["observations"], steps["actions"], steps["rewards"]

    def write_episode() -> None:
        writer = dataset.new_episode(obs[0])
        for t in range(count):
            writer.add_step(
                {
                    "observations": obs[t + 1],
                    "actions": actions[t],
                    "rewards": rewards[t],
                    "terminated": t == count - 1,
                    "truncated": False,
                }
            )

    return write_episode


def _check_written(dataset: Dataset, steps: dict[str, Any], count: int) -> None:
    episode = dataset.episode(dataset.num_episodes - 1)
    segment = episode.read()
    want = np.stack(steps["observations"][: count + 1])
    if not (np.array_equal(segment.all_obs, want) and bool(segment.terminated[-1])):
        raise AssertionError("the written episode does not read back as written")
    if not np.array_equal(segment.action, np.asarray(steps["actions"][:count])):
        raise AssertionError("the written actions do not read back as written")


def run_w5(context: Context) -> WorkloadResult:
    """W5: step-by-step writes, memory and Zarr, against appends to NumPy and TorchRL."""
    from episodata import Dataset

    s = context.sizes
    count = s.write_episode_steps
    result = WorkloadResult(
        "W5", f"CartPole-shaped new_episode + add_step, episodes of {count} steps"
    )
    steps = cartpole_steps(count, s.seed)
    systems = Systems(context, result, "steps/s", preload=("tensorstore",))

    def episodata(path: str | None) -> Callable[[], Opened]:
        def build() -> Opened:
            folder = None if path is None else context.run_dir / path
            dataset = Dataset.create(cartpole_schema(), folder)
            write = _episode_writer(dataset, steps, count)

            def check(call: Callable[[], Any]) -> None:
                _check_written(dataset, steps, count)

            return Opened(
                lambda: write,
                check,
                units_per_call=count,
                disk=folder,
                note="durable at finalize (fsync)" if path else "memory backend",
            )

        return build

    def numpy_append() -> Opened:
        size = count + 1
        obs = np.empty((size, 4), dtype=np.float32)
        action = np.empty(size, dtype=np.int64)
        reward = np.empty(size, dtype=np.float32)
        source_obs, source_actions = steps["observations"], steps["actions"]

        def write() -> None:
            obs[0] = source_obs[0]
            for t in range(count):
                obs[t + 1] = source_obs[t + 1]
                action[t + 1] = source_actions[t]
                reward[t + 1] = steps["rewards"][t]

        return Opened(lambda: write, units_per_call=count, note="row assignment, no checks")

    def torchrl() -> Opened:
        import torch
        from tensordict import TensorDict

        rl = torchrl_data()
        LazyTensorStorage, ReplayBuffer = rl.LazyTensorStorage, rl.ReplayBuffer

        buffer = ReplayBuffer(storage=LazyTensorStorage(1 << 20))
        source_obs = steps["observations"]

        def write() -> None:
            for t in range(count):
                step = TensorDict(
                    {
                        "observation": torch.from_numpy(source_obs[t]),
                        "action": torch.tensor(steps["actions"][t]),
                        "reward": torch.tensor(steps["rewards"][t]),
                        ("next", "observation"): torch.from_numpy(source_obs[t + 1]),
                        ("next", "done"): torch.tensor(t == count - 1),
                    },
                    batch_size=[],
                )
                buffer.add(step)

        return Opened(lambda: write, units_per_call=count, note="ReplayBuffer.add per step")

    systems.add("episodata memory", "episodata", episodata(None))
    systems.add("episodata zarr", "episodata", episodata("w5.zarr"))
    systems.add("numpy-append", "ceiling", numpy_append)
    systems.add("torchrl-lazy", "peer", torchrl, requires="torchrl")
    systems.run()
    memory = result.figure("episodata memory")
    rate = memory.rate if memory is not None and memory.ok else None
    result.targets += [
        Target("episodata memory steps/s", 150_000, rate),
        ratio_target(result, "episodata zarr", "episodata memory", 0.5),
    ]
    return result
