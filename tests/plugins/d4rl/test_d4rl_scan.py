"""The pre-pass's element-wise tests, computed piece by piece, against whole-array formulas."""

from __future__ import annotations

import numpy as np
import pytest

from episodata_d4rl import _impl


def _differs_whole(a: np.ndarray, b: np.ndarray, atol: float) -> np.ndarray:
    """The test written out on the whole arrays at once (the oracle)."""
    a2, b2 = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    with np.errstate(invalid="ignore"):
        same = (np.abs(a2 - b2) <= atol) | (a2 == b2) | (np.isnan(a2) & np.isnan(b2))
    return ~same.all(axis=1)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("piece_bytes", [1, 24, 1 << 20])
def test_differs_matches_the_whole_array_test(monkeypatch, dtype, piece_bytes):
    monkeypatch.setattr(_impl, "_PIECE_BYTES", piece_bytes)
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, size=(500, 3)).astype(dtype)
    b = a.copy()
    rows = rng.choice(500, 120, replace=False)
    if dtype.startswith("float"):
        b[rows[:30], 1] += 1e-9  # within atol
        b[rows[30:60], 0] += 0.5  # beyond it
        a[rows[60:80], 2] = b[rows[60:80], 2] = np.nan  # NaN equals NaN
        a[rows[80:100], 0] = np.nan  # NaN against a number differs
        a[rows[100:110], 1] = b[rows[100:110], 1] = np.inf  # inf equals inf
        b[rows[110:], 1] = -np.inf
    else:
        b[rows[:60], 0] += 1
    got = _impl._differs(a, b, 1e-6)
    np.testing.assert_array_equal(got, _differs_whole(a, b, 1e-6))
    assert got.sum() > 0


@pytest.mark.parametrize("piece_bytes", [1, 40, 1 << 20])
def test_non_finite_count_matches_a_plain_count(monkeypatch, piece_bytes):
    monkeypatch.setattr(_impl, "_PIECE_BYTES", piece_bytes)
    values = np.random.default_rng(6).standard_normal((300, 5))
    flat = values.reshape(-1)
    flat[::7] = np.nan
    flat[3::11] = np.inf
    want = sum(1 for v in flat.tolist() if not np.isfinite(v))
    assert _impl._count_non_finite(values) == want
    assert _impl._count_non_finite(np.arange(40).reshape(8, 5)) == 0
