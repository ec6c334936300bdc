"""W6 (sampling latency as episodes grow) and W7 (online writes interleaved with sampling).

W6 fills one memory dataset up to 10^3 ... 10^6 episodes. Episodes are short (80 steps
of 16-byte rows: obs float32 ``[2]``, action, reward) so that 10^6 of them fit in
memory: the index, not the data, is what grows. They are added with
``dataset.backend.add_episode(rows, ...)``, the backend protocol's bulk write, which
skips the per-episode validation of ``Dataset.add_episode``; the rows are the same.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.ceilings import IndexPool, numpy_gather
from benchmarks.data import RowData, state_data
from benchmarks.harness import Opened, Systems
from benchmarks.measure import interleave
from benchmarks.peers import torchrl_data
from benchmarks.results import Figure, Target, WorkloadResult
from benchmarks.workloads.memory import check_segments

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks.harness import Context
    from episodata import Dataset

__all__ = ["run_w6", "run_w7"]


def _label(count: int) -> str:
    exponent = round(float(np.log10(count)))
    return f"1e{exponent}" if 10**exponent == count else str(count)


def _prefix(data: RowData, episodes: int) -> RowData:
    """The first ``episodes`` episodes of ``data`` (views)."""
    stop = int(data.offsets[episodes - 1] + data.lengths[episodes - 1] + 1)
    rows = {key: array[:stop] for key, array in data.rows.items()}
    return RowData(rows, data.lengths[:episodes], data.offsets[:episodes])


def run_w6(context: Context) -> WorkloadResult:
    """W6: p50 latency of one ``segment_stream`` batch at 10^3 ... 10^6 episodes."""
    from episodata import Dataset

    s = context.sizes
    length, batch = s.state_length, s.state_batch
    top = max(s.index_sizes)
    result = WorkloadResult(
        "W6",
        f"sampling latency vs episodes: {', '.join(_label(n) for n in s.index_sizes)} episodes "
        f"of {s.index_steps} steps, L={length}, B={batch}, prefetch=0",
    )
    data = state_data(top, s.index_steps, s.seed, obs_dim=2, action_dim=1)
    dataset = Dataset.create(data.schema())
    added = 0
    for count in sorted(s.index_sizes):
        began = time.perf_counter()
        for e in range(added, count):
            dataset.backend.add_episode(data.episode_rows(e), terminated=False, truncated=True)
        build_s = time.perf_counter() - began
        added = count
        context.log(f"  W6: {count} episodes ({build_s:.1f} s to add)")
        _measure_size(context, result, dataset, _prefix(data, count), build_s)
    figures = [f for f in result.figures if f.system.startswith("episodata") and f.ok]
    ceilings = [f for f in result.figures if f.system.startswith("numpy") and f.ok]
    growth = ceiling_growth = None
    if len(figures) >= 2 and figures[0].p50_ms and figures[-1].p50_ms:
        growth = figures[-1].p50_ms / figures[0].p50_ms
    if len(ceilings) >= 2 and ceilings[0].p50_ms and ceilings[-1].p50_ms:
        ceiling_growth = ceilings[-1].p50_ms / ceilings[0].p50_ms
        result.extra["numpy_growth"] = ceiling_growth
    shown = "-" if ceiling_growth is None else f"{ceiling_growth:.2f}"
    result.targets.append(
        Target(
            f"p50 latency {_label(top)} / {_label(min(s.index_sizes))} episodes",
            2.0,
            growth,
            comparison="<=",
            note=f"the NumPy gather of the same rows grows {shown}x (caches, TLB)",
        )
    )
    return result


def _measure_size(
    context: Context, result: WorkloadResult, dataset: Dataset, data: RowData, build_s: float
) -> None:
    s = context.sizes
    length, batch, seed = s.state_length, s.state_batch, s.seed
    label = _label(data.num_episodes)
    began = time.perf_counter()
    stream = dataset.segment_stream(sequence_length=length, batch_size=batch, seed=seed, prefetch=0)
    stream.sample()
    first_ms = (time.perf_counter() - began) * 1e3
    if data.num_episodes == min(s.index_sizes):
        check_segments(dataset, data, length, seed)
    index, sampler = stream.index, stream.sampler
    pool = IndexPool(data, length, batch, seed)
    calls: dict[str, Callable[[], Any]] = {
        "episodata": stream.sample,
        "index": lambda: index.locate(sampler.sample(index, batch)),
        "numpy": lambda: numpy_gather(data.rows, pool.take()[2], length),
    }
    stats = interleave(calls, rounds=s.rounds, seconds=s.round_seconds, min_calls=s.min_calls)
    mine = Figure(f"episodata @{label}", "episodata", "batches/s", first_ms=first_ms)
    mine.__dict__.update(stats["episodata"].figures())
    mine.note = "stream.sample(), prefetch=0"
    mine.extra = {
        "episodes": data.num_episodes,
        "add_s": round(build_s, 2),
        "index_p50_ms": stats["index"].percentile_ms(50),
    }
    mine.extra["ceiling"] = f"numpy @{label}"
    ceiling = Figure(f"numpy @{label}", "ceiling", "batches/s")
    ceiling.__dict__.update(stats["numpy"].figures())
    result.figures += [mine, ceiling]


def _p50_growth(result: WorkloadResult, low: str, high: str) -> float | None:
    """p50 latency of ``high`` over ``low``, when both were measured."""
    a, b = result.figure(low), result.figure(high)
    if a is None or b is None or not (a.ok and b.ok and a.p50_ms and b.p50_ms):
        return None
    return b.p50_ms / a.p50_ms


def _online_dataset(data: RowData, episodes: int) -> Dataset:
    from episodata import Dataset

    dataset = Dataset.create(data.schema())
    for episode in data.episodes(episodes):
        dataset.add_episode(episode)
    return dataset


def run_w7(context: Context) -> WorkloadResult:
    """W7: one ``add_step`` then one ``sample()`` per call, after N prefilled episodes."""
    s = context.sizes
    length, batch, seed = s.state_length, s.state_batch, s.seed
    steps = s.online_prefill_steps
    result = WorkloadResult(
        "W7",
        f"online: add_step + sample() (L={length}, B={batch}, prefetch=0) after "
        f"{', '.join(_label(n) for n in s.online_prefill)} episodes of {steps} steps",
    )
    top = max(s.online_prefill)
    data = state_data(top + 1, steps, s.seed)
    online = data.episode(top)  # the episode recorded step by step
    systems = Systems(context, result, "steps/s")

    def episodata(count: int, *, sample: bool = True) -> Callable[[], Opened]:
        def build() -> Opened:
            dataset = _online_dataset(data, count)
            check_segments(dataset, _prefix(data, count), length, seed)
            state: dict[str, Any] = {"writer": None, "t": 0}

            def open_() -> Callable[[], Any]:
                stream = dataset.segment_stream(
                    sequence_length=length, batch_size=batch, seed=seed, prefetch=0
                )

                def step() -> Any:
                    writer, t = state["writer"], state["t"]
                    if writer is None or t == steps:
                        writer, t = dataset.new_episode(online["initial_observation"]), 0
                    writer.add_step(
                        {
                            "observations": online["observations"][t],
                            "actions": online["actions"][t],
                            "rewards": online["rewards"][t],
                            "truncated": t == steps - 1,
                        }
                    )
                    state["writer"], state["t"] = writer, t + 1
                    # without sampling: the step plus the index catching up with it,
                    # the part an O(episodes) rebuild per write would make grow
                    return stream.sample() if sample else stream.index.refresh()

                return step

            note = "memory backend" if sample else "add_step + index refresh, no gather"
            return Opened(open_, note=note)

        return build

    def torchrl(count: int) -> Callable[[], Opened]:
        def build() -> Opened:
            import torch
            from tensordict import TensorDict

            rl = torchrl_data()
            LazyTensorStorage, ReplayBuffer = rl.LazyTensorStorage, rl.ReplayBuffer
            SliceSampler = rl.SliceSampler

            prefix = _prefix(data, count)
            sampler = SliceSampler(
                slice_len=length + 1, traj_key="episode", strict_length=True, cache_values=True
            )
            buffer = ReplayBuffer(
                storage=LazyTensorStorage(data.num_rows * 2),
                sampler=sampler,
                batch_size=batch * (length + 1),
            )
            columns = {k.split("/", 1)[1]: torch.from_numpy(v) for k, v in prefix.rows.items()}
            columns["episode"] = torch.from_numpy(prefix.episode_ids())
            buffer.extend(TensorDict(columns, batch_size=[prefix.num_rows]))
            rows = data.episode_rows(top)
            state = {"t": 0, "episode": count}

            def step() -> Any:
                t = state["t"] % (steps + 1)
                if t == 0:
                    state["episode"] += 1
                row = TensorDict(
                    {k.split("/", 1)[1]: torch.as_tensor(v[t]) for k, v in rows.items()},
                    batch_size=[],
                )
                row["episode"] = torch.tensor(state["episode"])
                buffer.add(row)
                state["t"] += 1
                return buffer.sample()

            return Opened(lambda: step, note="ReplayBuffer.add + SliceSampler sample")

        return build

    def ceiling(count: int) -> Callable[[], Opened]:
        def build() -> Opened:
            prefix = _prefix(data, count)
            pool = IndexPool(prefix, length, batch, seed)
            return Opened(
                lambda: lambda: numpy_gather(prefix.rows, pool.take()[2], length),
                note="NumPy gather of one batch from the prefilled rows (no write)",
            )

        return build

    for count in s.online_prefill:
        systems.add(f"episodata @{_label(count)}", "episodata", episodata(count))
    for count in s.online_prefill:
        systems.add(
            f"episodata write @{_label(count)}", "episodata", episodata(count, sample=False)
        )
    for count in s.online_prefill:
        systems.add(f"numpy @{_label(count)}", "ceiling", ceiling(count))
    for count in s.online_prefill:
        systems.add(f"torchrl-lazy @{_label(count)}", "peer", torchrl(count), requires="torchrl")
    systems.run()
    for figure in result.figures:
        label = figure.system.rsplit("@", 1)[-1]
        # the write-only rows have no ceiling: the NumPy gather does not write
        no_ceiling = " write @" in figure.system
        figure.extra.setdefault("ceiling", "-" if no_ceiling else f"numpy @{label}")
    first, last = _label(min(s.online_prefill)), _label(top)
    writes = _p50_growth(result, f"episodata write @{first}", f"episodata write @{last}")
    growth = _p50_growth(result, f"episodata @{first}", f"episodata @{last}")
    gather = _p50_growth(result, f"numpy @{first}", f"numpy @{last}")

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    # the target is on the write and the index upkeep: the gather of a growing dataset
    # slows with the memory hierarchy (W6's subject), whatever the index does
    result.targets.append(
        Target(
            f"per-step p50 cost of add_step + index refresh {last} / {first} episodes",
            1.5,
            writes,
            comparison="<=",
            note=f"flat: an O(episodes) rebuild per write would grow ~{top // min(s.online_prefill)}x;"
            f" with sample() the step grows {shown(growth)}x, the NumPy gather alone"
            f" {shown(gather)}x",
        )
    )
    return result
