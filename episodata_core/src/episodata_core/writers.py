"""Step-by-step writers: one episode, action-out recordings, and vector environments.

Every writer validates a whole step before handing its rows to the backend, so a
rejected step leaves the episode exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Self

import numpy as np
import numpy.typing as npt

from episodata_core.errors import DatasetStateError, FieldNotFoundError, SchemaError
from episodata_core.normalize import coerce, flatten, split_step

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from episodata_core._step_plan import StepPlan
    from episodata_core.dataset import Dataset
    from episodata_core.protocols import StorageBackend
    from episodata_core.schema import DatasetSchema, FieldSpec, Role

__all__ = ["ActionOutEpisodeWriter", "AutoresetMode", "EpisodeWriter", "VectorEpisodeWriter"]

AutoresetMode = Literal["next_step", "same_step"]
_GYM_AUTORESET: dict[str, AutoresetMode] = {"NextStep": "next_step", "SameStep": "same_step"}

_STEP_ROLES: tuple[tuple[str, Role], ...] = (
    ("observations", "observation"),
    ("actions", "action"),
    ("rewards", "reward"),
    ("infos", "info"),
)


_Declared = dict[str, tuple["FieldSpec", str]]
_Held = tuple[tuple["FieldSpec", str], ...]


class _RowBuilder:
    """Validates per-step values of each role against the fields an episode holds."""

    def __init__(self, schema: DatasetSchema, present: frozenset[str]) -> None:
        self.schema = schema
        self.present = present
        # looked up once per role and writer, not once per step and field
        self._fields: dict[Role, tuple[_Declared, _Held]] = {}

    def _role_fields(self, role: Role) -> tuple[_Declared, _Held]:
        """The role's fields by key, and those of them this episode holds."""
        fields = self._fields.get(role)
        if fields is None:
            declared = {spec.key: (spec, spec.qualified_key) for spec in self.schema.by_role(role)}
            held = tuple(pair for pair in declared.values() if pair[1] in self.present)
            fields = self._fields[role] = (declared, held)
        return fields

    def role_rows(
        self, role: Role, value: Any, where: str, count: int | None
    ) -> dict[str, npt.NDArray[Any]]:
        """Rows of one role; ``count`` is the leading step axis, ``None`` for one step."""
        given = flatten(value, role) if value is not None else {}
        declared, held = self._role_fields(role)
        rows: dict[str, npt.NDArray[Any]] = {}
        for key, item in given.items():
            found = declared.get(key)
            if found is None:
                raise FieldNotFoundError(
                    f"{where}: unknown {role} field {key!r} (the schema's {role} fields are "
                    f"{list(declared)})"
                )
            spec, qualified_key = found
            if qualified_key not in self.present:
                raise SchemaError(
                    f"{where}: optional {role} field {key!r} is absent from this episode "
                    "(it was not given at the reset); give an optional field on every step "
                    "or on none"
                )
            if count is None:
                rows[qualified_key] = coerce(item, spec, where=where)[None]
            else:
                rows[qualified_key] = coerce(item, spec, where=where, leading=(count,))
        for spec, qualified_key in held:
            if qualified_key not in rows:
                kind = "optional" if spec.optional else "required"
                listed = f"given: {sorted(given)}" if given else f"no {role} field was given"
                raise SchemaError(
                    f"{where}: {kind} {role} field {spec.key!r} is missing ({listed}); every "
                    "step must give the fields the episode holds"
                )
        return rows

    def step_rows(
        self, data: Mapping[str, Any], where: str, count: int | None
    ) -> dict[str, npt.NDArray[Any]]:
        """Rows of every role of a step (or ``count`` steps)."""
        if data.get("observations") is None:
            raise SchemaError(
                f"{where}: 'observations' is missing (the observation this step produced)"
            )
        rows: dict[str, npt.NDArray[Any]] = {}
        for canonical, role in _STEP_ROLES:
            rows.update(self.role_rows(role, data.get(canonical), where, count))
        return rows


def _reset_rows(
    schema: DatasetSchema, observation: Any, infos: Mapping[str, Any] | None, where: str
) -> tuple[dict[str, npt.NDArray[Any]], frozenset[str]]:
    """Row 0 of a step-written episode and the fields the episode will hold.

    Optional observation and info fields are present when the reset gives them; optional
    action and reward fields are always present in step-written episodes.
    """
    given = {f"observation/{k}" for k in flatten(observation, "observation")}
    given |= {f"info/{k}" for k in flatten(infos, "info")} if infos else set()
    present = frozenset(
        spec.qualified_key
        for spec in schema
        if not spec.optional or spec.role in ("action", "reward") or spec.qualified_key in given
    )
    builder = _RowBuilder(schema, present)
    rows = builder.role_rows("observation", observation, where, None)
    rows.update(builder.role_rows("info", infos or None, where, None))
    for spec in schema:
        if spec.role in ("action", "reward"):
            # hidden row 0: no action led to the reset observation
            rows[spec.qualified_key] = np.zeros((1, *spec.shape), dtype=spec.np_dtype)
    return rows, present


def _flag(value: Any, name: str, where: str) -> bool:
    flag = np.asarray(value)
    if flag.ndim != 0 or flag.dtype.kind not in "biuf":
        raise SchemaError(f"{where}: {name!r} must be one bool, got {flag!r}")
    return bool(flag)


_Prepared = tuple[dict[str, npt.NDArray[Any]], bool, bool]


class EpisodeWriter:
    """Appends the steps of one ongoing episode.

    Steps are action-in: each gives the observation its action produced. A truthy
    ``terminated`` or ``truncated`` finalizes the episode and closes the writer. Used as
    a context manager, a normal exit ends the episode without flags; an exception leaves
    it ongoing so that :meth:`Dataset.resume_episode` can continue it.
    """

    def __init__(
        self, dataset: Dataset, episode: int, present: frozenset[str], *, steps: int = 0
    ) -> None:
        self._dataset = dataset
        self._episode = episode
        self._present = present
        self._generic: _RowBuilder | None = None
        self._plan: StepPlan = dataset._writer_plans.get(dataset.schema, present)
        # the backend whose append_step (None: it has none) add_step last looked up
        self._bound: StorageBackend | None = None
        self._append_step: Callable[[int, Mapping[str, Any]], None] | None = None
        self._closed = False
        # counted here so that error locations cost nothing on the hot path
        self._steps = steps

    @classmethod
    def start(
        cls, dataset: Dataset, observation: Any, infos: Mapping[str, Any] | None
    ) -> EpisodeWriter:
        """Validate the reset row and begin a new ongoing episode."""
        # most resets give the fields the previous one gave: its plan builds their row
        last = dataset._writer_plans.last
        rows = None if last is None else last.reset_rows(observation, infos or None)
        if last is not None and rows is not None:
            present = last.present
        else:
            where = f"episode {dataset.num_episodes}, reset"
            rows, present = _reset_rows(dataset.schema, observation, infos, where)
        with dataset._io_lock:
            episode = dataset._backend.start_episode(rows)
        return cls(dataset, episode, present)

    @classmethod
    def resume(cls, dataset: Dataset, episode: int) -> EpisodeWriter:
        """A writer for an ongoing episode that already has rows."""
        table = dataset.backend.episode_table()
        present = frozenset(
            spec.qualified_key
            for spec in dataset.schema
            if spec.qualified_key not in table.present or table.present[spec.qualified_key][episode]
        )
        return cls(dataset, episode, present, steps=int(table.length[episode]))

    @property
    def episode(self) -> int:
        """Id of the episode being written."""
        return self._episode

    @property
    def closed(self) -> bool:
        """Whether the episode was finalized through this writer."""
        return self._closed

    @property
    def _builder(self) -> _RowBuilder:
        # built on the first step the plan does not recognize: most writers never need it
        if self._generic is None:
            self._generic = _RowBuilder(self._dataset.schema, self._present)
        return self._generic

    def _where(self) -> str:
        self._check_open()
        return f"episode {self._episode}, step {self._steps}"

    def _check_open(self) -> None:
        if self._closed:
            raise DatasetStateError(
                f"the writer of episode {self._episode} is closed: the episode was finalized"
            )

    def add_step(self, step: Mapping[str, Any]) -> None:
        """Append one step.

        Keys: ``observations`` (what the action produced), ``actions``, ``rewards``,
        ``infos``, ``terminated``, ``truncated``.
        """
        # the common step inline (exact values, bool flags): this call is what bounds
        # recording in memory, and each call saved here is a few percent of a step
        exact = None if self._closed else self._plan.prepare(step)
        if exact is not None:
            values, terminated, truncated = exact
            if type(terminated) is bool and type(truncated) is bool:
                dataset = self._dataset
                with dataset._io_lock:
                    backend = dataset._backend
                    if backend is not self._bound:
                        self._bound = backend
                        self._append_step = getattr(backend, "append_step", None)
                    append_step = self._append_step
                    if append_step is not None:
                        append_step(self._episode, values)
                    else:
                        backend.append_rows(self._episode, self._plan.rows(values))
                self._steps += 1
                if terminated or truncated:
                    self._finalize(terminated=terminated, truncated=truncated)
                return
        self._commit(*self._prepare(step))

    def _prepare(self, step: Mapping[str, Any]) -> _Prepared:
        """Validated rows and flags of one step; the episode is not touched yet."""
        if self._closed:
            self._check_open()  # raises
        exact = self._plan.prepare(step)
        if exact is None:
            return self._prepare_generic(step)
        values, terminated, truncated = exact
        rows = self._plan.rows(values)
        if type(terminated) is not bool or type(truncated) is not bool:
            # the generic path checks the flags after the rows, which the plan has just
            # accepted, so the generic check here raises the very same errors
            where = self._where()
            terminated = _flag(terminated, "terminated", where)
            truncated = _flag(truncated, "truncated", where)
        return rows, terminated, truncated

    def _prepare_generic(self, step: Mapping[str, Any]) -> _Prepared:
        where = self._where()
        data = split_step(step, where)
        rows = self._builder.step_rows(data, where, None)
        terminated = _flag(data.get("terminated", False), "terminated", where)
        truncated = _flag(data.get("truncated", False), "truncated", where)
        return rows, terminated, truncated

    def _commit(self, rows: dict[str, npt.NDArray[Any]], terminated: bool, truncated: bool) -> None:
        count = next(iter(rows.values())).shape[0] if rows else 0
        if count:
            dataset = self._dataset
            with dataset._io_lock:
                dataset._backend.append_rows(self._episode, rows)
            self._steps += count
        if terminated or truncated:
            self._finalize(terminated=terminated, truncated=truncated)

    def add_steps(self, steps: Mapping[str, Any]) -> None:
        """Append several steps at once: every value has a leading step axis ``[n, ...]``.

        ``terminated``/``truncated`` are scalars (applying to the last step) or ``[n]``
        flags that may be True only on the last entry.
        """
        where = self._where()
        data = split_step(steps, where)
        first = next(iter(flatten(data.get("observations"), "observation").values()), None)
        if first is None or np.ndim(first) == 0:
            raise SchemaError(f"{where}: 'observations' needs a leading step axis [n, ...]")
        count = int(np.shape(first)[0])
        rows = self._builder.step_rows(data, where, count)
        terminated = _last_flag(data.get("terminated", False), "terminated", count, where)
        truncated = _last_flag(data.get("truncated", False), "truncated", count, where)
        self._commit(rows, terminated, truncated)

    def end(self, *, terminated: bool = False, truncated: bool = False) -> None:
        """Finalize the episode with the given flags (both False: it simply stopped)."""
        where = self._where()
        self._finalize(
            terminated=_flag(terminated, "terminated", where),
            truncated=_flag(truncated, "truncated", where),
        )

    def _finalize(self, *, terminated: bool, truncated: bool) -> None:
        with self._dataset._io_lock:
            self._dataset.backend.finalize_episode(
                self._episode, terminated=terminated, truncated=truncated
            )
        self._closed = True
        self._dataset._after_episode_written(self._episode)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None and not self._closed:
            self.end()


def _last_flag(value: Any, name: str, count: int, where: str) -> bool:
    flags = np.asarray(value)
    if flags.ndim == 0:
        return _flag(flags, name, where)
    if flags.shape != (count,):
        raise SchemaError(
            f"{where}: {name!r} must be one bool or {count} flags, got shape {flags.shape}"
        )
    early = np.flatnonzero(flags[:-1].astype(bool))
    if early.size:
        raise SchemaError(
            f"{where}: {name!r} is True at entry {int(early[0])} before the last of {count} "
            "steps; an episode ends at its first such step"
        )
    return bool(count and flags[-1])


class ActionOutEpisodeWriter:
    """Records an episode from a logger that stores the action taken *at* each observation.

    Each :meth:`add_step` gives ``observations`` (where the action was taken),
    ``actions``, ``rewards`` and optional ``infos``. :meth:`end` takes the
    ``final_observation`` the last action produced; without one, the last action and
    reward pair with no observation and are dropped (``end`` returns how many).
    """

    def __init__(self, dataset: Dataset) -> None:
        self._dataset = dataset
        self._writer: EpisodeWriter | None = None
        self._pending: dict[str, Any] = {}

    @property
    def episode(self) -> int | None:
        """Id of the episode, once the first step started it."""
        return None if self._writer is None else self._writer.episode

    def add_step(self, step: Mapping[str, Any]) -> None:
        """Record one action-out step."""
        data = split_step(step, "action-out step")
        if "terminated" in data or "truncated" in data:
            raise SchemaError(
                "action-out step: pass terminated/truncated to end(), together with the "
                "final observation the last action produced"
            )
        acted: dict[str, Any] = {k: data[k] for k in ("actions", "rewards") if k in data}
        observed: dict[str, Any] = {k: data[k] for k in ("observations", "infos") if k in data}
        schema = self._dataset.schema
        if self._writer is None:
            where = f"episode {self._dataset.num_episodes}, action-out step 0"
            rows, present = _reset_rows(schema, data.get("observations"), data.get("infos"), where)
            _check_acted(_RowBuilder(schema, present), acted, where)
            with self._dataset._io_lock:
                episode = self._dataset.backend.start_episode(rows)
            self._writer = EpisodeWriter(self._dataset, episode, present)
        else:
            writer = self._writer
            prepared = writer._prepare({**self._pending, **observed})
            # the action is checked now, not one step later when its row is written
            if not writer._plan.exact(acted, ("actions", "rewards")):
                _check_acted(writer._builder, acted, writer._where())
            writer._commit(*prepared)
        self._pending = acted

    def end(
        self,
        final_observation: Any = None,
        *,
        final_info: Mapping[str, Any] | None = None,
        terminated: bool = False,
        truncated: bool = False,
    ) -> int:
        """Finalize; returns the number of dropped steps (0 or 1)."""
        if self._writer is None:
            raise DatasetStateError("action-out episode: end() before any add_step()")
        if final_observation is not None:
            step = {**self._pending, "observations": final_observation}
            if final_info is not None:
                step["infos"] = final_info
            self._writer.add_step(step)
            self._writer.end(terminated=terminated, truncated=truncated)
            return 0
        # the flagged step is the one dropped, so the kept episode stops short of its end
        self._writer.end(truncated=bool(terminated or truncated))
        return 1


def _check_acted(builder: _RowBuilder, acted: Mapping[str, Any], where: str) -> None:
    builder.role_rows("action", acted.get("actions"), where, None)
    builder.role_rows("reward", acted.get("rewards"), where, None)


class VectorEpisodeWriter:
    """Writes the episodes of a Gymnasium 1.x vector environment, one per sub-env.

    ``autoreset_mode="next_step"`` (Gymnasium's default): after a sub-env's episode
    ends, its next step returns the reset observation and ignores the action; that step
    starts the sub-env's next episode. ``"same_step"``: the ending step already returns
    the reset observation and puts the final one in ``infos["final_obs"]`` (and its info
    in ``infos["final_info"]``). A step is validated for every sub-env before any
    sub-env's rows are written.
    """

    def __init__(
        self,
        dataset: Dataset,
        observations: Any,
        infos: Mapping[str, Any] | None,
        *,
        autoreset_mode: AutoresetMode = "next_step",
    ) -> None:
        # Gymnasium's own AutoresetMode enum (envs.metadata["autoreset_mode"]) works too
        autoreset_mode = _GYM_AUTORESET.get(
            str(getattr(autoreset_mode, "value", "")), autoreset_mode
        )
        if autoreset_mode not in ("next_step", "same_step"):
            raise SchemaError(
                f"autoreset_mode must be 'next_step' or 'same_step', got {autoreset_mode!r}; "
                "record envs without autoreset with one new_episode() per sub-env"
            )
        self._dataset = dataset
        self._mode = autoreset_mode
        self._num_envs = _batch_size(observations)
        _check_sub_envs(observations, "observations", self._num_envs, "vector reset")
        resets = [
            self._prepare_reset(_env_slice(observations, i), self._env_infos(infos, i), i)
            for i in range(self._num_envs)
        ]
        self._writers: list[EpisodeWriter | None] = [self._begin(*reset) for reset in resets]

    @property
    def num_envs(self) -> int:
        """Number of sub-environments."""
        return self._num_envs

    @property
    def episodes(self) -> list[int | None]:
        """Id of each sub-env's ongoing episode (``None`` while it waits for its reset)."""
        return [None if w is None else w.episode for w in self._writers]

    def _env_infos(self, infos: Mapping[str, Any] | None, i: int) -> dict[str, Any] | None:
        if not infos or not self._dataset.schema.by_role("info"):
            return None
        # Gymnasium marks which sub-envs set an info key with a '_key' boolean array,
        # at every level of nested info dicts
        return {
            key: _env_slice(_without_masks(value), i)
            for key, value in infos.items()
            if not key.startswith("_") and key not in ("final_obs", "final_info")
        }

    def _prepare_reset(
        self, observation: Any, infos: Mapping[str, Any] | None, i: int
    ) -> tuple[dict[str, npt.NDArray[Any]], frozenset[str]]:
        where = f"vector sub-env {i}, reset"
        return _reset_rows(self._dataset.schema, observation, infos, where)

    def _begin(self, rows: dict[str, npt.NDArray[Any]], present: frozenset[str]) -> EpisodeWriter:
        with self._dataset._io_lock:
            episode = self._dataset.backend.start_episode(rows)
        return EpisodeWriter(self._dataset, episode, present)

    def add_step(self, step: Mapping[str, Any]) -> None:
        """Record one ``envs.step(actions)``: every value has a leading ``[N]`` axis."""
        data = split_step(step, "vector step")
        if data.get("observations") is None:
            raise SchemaError("vector step: 'observations' is missing")
        for key in ("observations", "actions", "rewards"):
            if key in data:
                _check_sub_envs(data[key], key, self._num_envs, "vector step")
        flags = {name: self._flags(data, name) for name in ("terminated", "truncated")}
        infos = data.get("infos")
        plans = [self._plan(i, data, flags, infos) for i in range(self._num_envs)]
        for i, (prepared, reset) in enumerate(plans):
            writer = self._writers[i]
            if prepared is not None and writer is not None:
                writer._commit(*prepared)
                self._writers[i] = None if prepared[1] or prepared[2] else writer
            if reset is not None:
                self._writers[i] = self._begin(*reset)

    def _flags(self, data: Mapping[str, Any], name: str) -> npt.NDArray[np.bool_]:
        flags = np.asarray(data.get(name, np.zeros(self._num_envs, dtype=bool)))
        if flags.shape != (self._num_envs,) or flags.dtype.kind not in "biuf":
            raise SchemaError(
                f"vector step: {name!r} must be {self._num_envs} bools, got {flags.dtype} "
                f"of shape {flags.shape}"
            )
        return flags.astype(bool)

    def _plan(
        self,
        i: int,
        data: Mapping[str, Any],
        flags: Mapping[str, npt.NDArray[np.bool_]],
        infos: Mapping[str, Any] | None,
    ) -> tuple[_Prepared | None, tuple[dict[str, npt.NDArray[Any]], frozenset[str]] | None]:
        """Validated rows for sub-env ``i``: its step, and a new episode's reset if one starts."""
        observation = _env_slice(data["observations"], i)
        env_infos = self._env_infos(infos, i)
        writer = self._writers[i]
        if writer is None:
            # next-step autoreset: this step is the reset; its action was ignored
            return None, self._prepare_reset(observation, env_infos, i)
        terminated, truncated = bool(flags["terminated"][i]), bool(flags["truncated"][i])
        reset = None
        if self._mode == "same_step" and (terminated or truncated):
            if infos is None or "final_obs" not in infos:
                raise SchemaError(
                    f"vector step, sub-env {i}: same-step autoreset needs infos['final_obs'] "
                    "(the observation the ending step produced); pass infos=infos"
                )
            reset = self._prepare_reset(observation, env_infos, i)
            observation = _env_slice(infos["final_obs"], i)
            final_info = infos.get("final_info")
            env_infos = self._env_infos(final_info, i) if final_info is not None else None
        step: dict[str, Any] = {
            "observations": observation,
            "terminated": terminated,
            "truncated": truncated,
        }
        for key in ("actions", "rewards"):
            if key in data:
                step[key] = _env_slice(data[key], i)
        if env_infos:
            step["infos"] = env_infos
        return writer._prepare(step), reset

    def close(self) -> None:
        """Stop recording; unfinished episodes stay ongoing (see ``resume_episode``)."""
        self._writers = [None] * self._num_envs


def _check_sub_envs(value: Any, name: str, num_envs: int, where: str) -> None:
    # slicing sub-env i out of a shorter array fails with a bare IndexError, and out of a
    # longer one silently drops the extra entries
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_sub_envs(item, f"{name}/{key}", num_envs, where)
        return
    shape = np.shape(value)
    if not shape or shape[0] != num_envs:
        got = shape[0] if shape else "a scalar"
        raise SchemaError(
            f"{where}, {name!r}: expected one entry per sub-env ({num_envs} sub-envs), "
            f"got {got} (shape {shape})"
        )


def _batch_size(observations: Any) -> int:
    if isinstance(observations, Mapping):
        return _batch_size(next(iter(observations.values())))
    array = np.asarray(observations)
    if array.ndim == 0:
        raise SchemaError("vector writer: observations need a leading sub-env axis [N, ...]")
    return int(array.shape[0])


def _without_masks(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_masks(v) for k, v in value.items() if not str(k).startswith("_")}
    return value


def _env_slice(value: Any, i: int) -> Any:
    if isinstance(value, Mapping):
        return {k: _env_slice(v, i) for k, v in value.items()}
    return np.asarray(value)[i]
