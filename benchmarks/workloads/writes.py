"""W5: recording CartPole-shaped steps with ``new_episode`` + ``add_step``.

Steps arrive as an environment hands them out (a float32 ``[4]`` array, an int action,
a float reward, two flags), one call per step. One timed call writes one whole episode,
so latencies are per episode; the rate is steps per second. Every length of
``Sizes.write_episode_lengths`` (22 steps, CartPole's random-policy average, and 200)
runs memory, Zarr with ``durability="interval"`` (the default) and Zarr with
``durability="sync"``, all interleaved in the same rounds.

The physical floor of ``durability="sync"`` runs in the same rounds: one small append
plus ``os.fdatasync`` per call, on a file in the very folder that holds the Zarr
datasets. Each dataset's ``close()`` (where a backend folds what it deferred, such as
an episode log) is timed after the rounds and spread over the steps they wrote: the
rates include it, ``extra["finish_ms"]`` shows it, ``extra["rate_before_finish"]`` is
the rate without it. After ``close()`` each Zarr dataset is opened again and must hold
every episode written, the last one exactly as written.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.data import cartpole_steps
from benchmarks.harness import Opened, Systems
from benchmarks.peers import torchrl_data
from benchmarks.results import Target, WorkloadResult, ratio_target

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from benchmarks.harness import Context
    from episodata import Dataset, DatasetSchema

__all__ = ["cartpole_schema", "run_w5"]

# the absolute target for memory recording of 22-step episodes
MEMORY_TARGET_STEPS = 22
MEMORY_TARGET_RATE = 150_000
FLOOR = "append + fdatasync"
# macOS has no fdatasync; fsync is its closest
_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


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


class _Recorder:
    """Writes one whole episode per call and counts the episodes it wrote."""

    def __init__(self, dataset: Dataset, steps: dict[str, Any], count: int) -> None:
        self.dataset = dataset
        self.steps = steps
        self.count = count
        self.written = 0

    def __call__(self) -> None:
        steps, count = self.steps, self.count
        obs, actions, rewards = steps["observations"], steps["actions"], steps["rewards"]
        writer = self.dataset.new_episode(obs[0])
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
        self.written += 1


def _check_written(dataset: Dataset, steps: dict[str, Any], count: int) -> None:
    episode = dataset.episode(dataset.num_episodes - 1)
    segment = episode.read()
    want = np.stack(steps["observations"][: count + 1])
    if not (np.array_equal(segment.all_obs, want) and bool(segment.terminated[-1])):
        raise AssertionError("the written episode does not read back as written")
    if not np.array_equal(segment.action, np.asarray(steps["actions"][:count])):
        raise AssertionError("the written actions do not read back as written")


def _check_reopened(folder: Path, recorder: _Recorder) -> None:
    """After ``close()``: the folder holds every episode written, the last one intact."""
    from episodata import Dataset

    dataset = Dataset.open(folder, read_only=True)
    try:
        if dataset.num_episodes != recorder.written:
            raise AssertionError(
                f"{folder.name}: {dataset.num_episodes} episodes after close(), "
                f"{recorder.written} were written"
            )
        _check_written(dataset, recorder.steps, recorder.count)
    finally:
        dataset.close()


def _episode_cost(result: WorkloadResult, system: str, units: float) -> float | None:
    """Seconds per call of ``system`` (``units`` per call) from its rate, if measured."""
    figure = result.figure(system)
    if figure is None or not figure.ok or not figure.rate:
        return None
    return units / figure.rate


def _sync_target(result: WorkloadResult, count: int) -> Target:
    """Sync mode's cost per episode over (the default mode's + one fdatasync)."""
    name = f"zarr sync / (zarr default + one fdatasync) per episode @{count}"
    sync = _episode_cost(result, f"episodata zarr sync @{count}", count)
    default = _episode_cost(result, f"episodata zarr @{count}", count)
    floor = _episode_cost(result, FLOOR, 1)
    if sync is None or default is None or floor is None:
        return Target(name, 1.25, None, comparison="<=", note="not measured")
    note = f"{sync * 1e3:.3f} ms vs {default * 1e3:.3f} + {floor * 1e3:.3f} ms"
    return Target(name, 1.25, sync / (default + floor), comparison="<=", note=note)


def run_w5(context: Context) -> WorkloadResult:
    """W5: step-by-step writes, memory and Zarr, against appends to NumPy and TorchRL."""
    from episodata import Dataset

    s = context.sizes
    lengths = s.write_episode_lengths
    shown = " and ".join(str(n) for n in lengths)
    result = WorkloadResult("W5", f"CartPole-shaped new_episode + add_step, {shown}-step episodes")
    systems = Systems(context, result, "steps/s", preload=("tensorstore",))
    zarr_recorders: dict[str, tuple[Path, _Recorder]] = {}

    def episodata(
        count: int, steps: dict[str, Any], name: str, durability: str | None
    ) -> Callable[[], Opened]:
        def build() -> Opened:
            if durability is None:
                folder, options, note = None, {}, "memory backend"
            else:
                folder = context.run_dir / f"w5-{durability}-{count}.zarr"
                # the default system passes no option: it measures whatever zarr defaults to
                options = {} if durability == "interval" else {"durability": durability}
                shown = "default ('interval')" if not options else repr(durability)
                note = f"durability {shown}; close() in the rate"
            dataset = Dataset.create(cartpole_schema(), folder, **options)
            recorder = _Recorder(dataset, steps, count)
            if folder is not None:
                zarr_recorders[name] = (folder, recorder)

            def check(call: Callable[[], Any]) -> None:
                _check_written(dataset, steps, count)

            return Opened(
                lambda: recorder,
                check,
                finish=dataset.close,
                units_per_call=count,
                disk=folder,
                note=note,
                extra={"ceiling": f"numpy-append @{count}", "episode_steps": count},
            )

        return build

    def numpy_append(count: int, steps: dict[str, Any]) -> Callable[[], Opened]:
        def build() -> Opened:
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

        return build

    def torchrl(count: int, steps: dict[str, Any]) -> Callable[[], Opened]:
        def build() -> Opened:
            import torch
            from tensordict import TensorDict

            rl = torchrl_data()
            buffer = rl.ReplayBuffer(storage=rl.LazyTensorStorage(1 << 20))
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

            return Opened(
                lambda: write,
                units_per_call=count,
                note="ReplayBuffer.add per step",
                extra={"ceiling": f"numpy-append @{count}"},
            )

        return build

    def fdatasync_floor() -> Opened:
        # the same folder as the Zarr datasets: the same disk, file system and mount
        path = context.run_dir / "w5-fdatasync.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        record = b"\x00" * 64

        def sync() -> None:
            os.write(fd, record)
            _datasync(fd)

        return Opened(
            lambda: sync,
            finish=lambda: os.close(fd),
            disk=path,
            note="one 64-byte append + fdatasync per call: the floor of durability='sync'",
        )

    for count in lengths:
        steps = cartpole_steps(count, s.seed)
        for label, durability in (("memory", None), ("zarr", "interval"), ("zarr sync", "sync")):
            name = f"episodata {label} @{count}"
            systems.add(name, "episodata", episodata(count, steps, name, durability))
        systems.add(f"numpy-append @{count}", "ceiling", numpy_append(count, steps))
        systems.add(f"torchrl-lazy @{count}", "peer", torchrl(count, steps), requires="torchrl")
    systems.add(FLOOR, "ceiling", fdatasync_floor, unit="syncs/s")
    systems.run()
    for name, (folder, recorder) in zarr_recorders.items():
        figure = result.figure(name)
        if figure is not None and figure.ok:
            try:
                _check_reopened(folder, recorder)
            except Exception as err:  # noqa: BLE001 (reported on the system's row)
                figure.status = f"error: after close(): {type(err).__name__}: {err}"
    if MEMORY_TARGET_STEPS in lengths:
        memory = result.figure(f"episodata memory @{MEMORY_TARGET_STEPS}")
        rate = memory.rate if memory is not None and memory.ok else None
        label = f"episodata memory steps/s @{MEMORY_TARGET_STEPS}"
        result.targets.append(Target(label, MEMORY_TARGET_RATE, rate))
    for count in lengths:
        result.targets.append(
            ratio_target(result, f"episodata zarr @{count}", f"episodata memory @{count}", 0.5)
        )
    result.targets += [_sync_target(result, count) for count in lengths]
    return result
