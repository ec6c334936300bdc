from __future__ import annotations

import gc
import os
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session: starting it takes many seconds."""
    # under `uv run`, Ray would package the work tree for its workers, which share it
    # already; the flag is read when Ray is first imported
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray = pytest.importorskip("ray")
    runtime_env = {"env_vars": {"PYTHONPATH": str(ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}}
    if not ray.is_initialized():
        # a loaded machine can miss Ray's fixed 30 s start-up deadline once; the handles
        # of the failed start's processes are dropped without a ResourceWarning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            for attempt in range(2):
                try:
                    ray.init(
                        num_cpus=2,
                        include_dashboard=False,
                        log_to_driver=False,
                        runtime_env=runtime_env,
                    )
                    break
                except Exception:
                    ray.shutdown()
                    gc.collect()
                    if attempt:
                        raise
            gc.collect()
    with warnings.catch_warnings():
        # Ray Data's own default context sets a field that it then calls deprecated;
        # the context is made once per process, here
        warnings.simplefilter("ignore", DeprecationWarning)
        import ray.data

        ray.data.DataContext.get_current()
    yield ray
    ray.shutdown()
