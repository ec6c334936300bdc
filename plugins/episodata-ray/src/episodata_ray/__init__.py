"""Run episodata pipelines on Ray, and read and write datasets with Ray Data.

The executor is a plugin of the ``episodata.executors`` group, selected by
``executor = "ray"`` in a pipeline file or ``episodata pipeline run FILE --executor
ray``. Ray itself is imported only when the executor runs or a Ray Data function is
called, never by ``import episodata_ray``.

Examples
--------
>>> import episodata_ray
>>> windows = episodata_ray.read_windows("hopper.zarr", sequence_length=8)  # doctest: +SKIP
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from episodata_core.errors import MissingDependencyError
from episodata_ray._api import read_episodes, read_windows, write_episodes

if TYPE_CHECKING:
    from episodata_core.dataset import Dataset
    from episodata_core.pipeline import ImportRequest, Step
    from episodata_core.transfer import ImportReport

__all__ = ["RayExecutor", "read_episodes", "read_windows", "write_episodes"]

__version__ = "0.3.0"


def require_ray() -> None:
    """Raise :class:`MissingDependencyError` with the install command when Ray is missing."""
    try:
        import ray  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(
            "the ray executor and episodata_ray's Ray Data functions run on Ray, which is "
            'not installed: pip install "episodata[ray]"'
        ) from err


class RayExecutor:
    """Runs a pipeline's import as one Ray task per source file, committed in file order.

    The dataset equals the local executor's episode for episode (ids, flags, values,
    metadata). A task whose worker dies is retried by Ray; shards are keyed by their
    input, so a retry never duplicates or loses episodes. Other steps (exports) run in
    this process.
    """

    name: ClassVar[str] = "ray"
    description: ClassVar[str] = "one Ray task per source file, committed in file order"

    class Options(BaseModel):
        """Where the Ray cluster is."""

        model_config = ConfigDict(extra="forbid", frozen=True)

        address: str | None = Field(
            default=None,
            description=(
                "'auto' joins the cluster started on this machine (`ray start --head`), "
                "'ray://HOST:10001' a remote one; None (the default) starts a local Ray."
            ),
        )
        num_cpus: int | None = Field(
            default=None, ge=1, description="CPUs of a local Ray this executor starts."
        )

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options if isinstance(options, RayExecutor.Options) else self.Options()
        self.cluster: dict[str, Any] = {}
        self.stats: Any = None

    def execute(self, step: Step) -> Any:
        """Run a step that is not split into tasks (an export) in this process."""
        return step.run()

    def import_files(
        self, request: ImportRequest, *, progress: bool
    ) -> tuple[Dataset, ImportReport]:
        """Import ``request.files``, one Ray task each; see the class docstring."""
        require_ray()
        from episodata_ray import _executor

        self.cluster = _executor.connect(self.options.address, self.options.num_cpus)
        self.stats = _executor.RunStats(cluster=self.cluster)
        return _executor.import_files(request, progress=progress, stats=self.stats)

    def provenance(self) -> dict[str, Any]:
        """The manifest's record of the run: executor, address, cluster size, versions."""
        record: dict[str, Any] = {
            "name": self.name,
            "address": self.options.address,
            "cluster": self.cluster,
            "versions": {d: _version(d) for d in ("episodata-ray", "ray")},
        }
        if self.stats is not None:
            stats = self.stats
            record["tasks"] = stats.tasks
            record["shards_reused"] = stats.shards_reused
            record["seconds"] = {
                "wall": round(stats.wall_seconds, 3),
                "tasks": round(stats.task_seconds, 3),
                "commit": round(stats.commit_seconds, 3),
            }
        return record


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"
