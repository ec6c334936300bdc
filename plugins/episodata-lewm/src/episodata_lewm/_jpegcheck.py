"""The structure of a window of JPEGs, checked for every blob at once without decoding.

A decode costs ~50 µs per 64x64 frame, 10-20x what reading the blob costs, and finds
nothing that the structure does not: libjpeg only warns about damage inside the
compressed scan data and fills in the pixels, and refuses only bad headers (of 48,000
seeded damages to recording frames, bytes set, bits flipped, runs cut, inserted or
removed, Pillow refused about 37 %; this check rejected every one of them or left it to
a decode, and rejected a third as many again that Pillow decodes into garbage).
So every blob of a window is parsed here, all blobs in step (NumPy over the Arrow data
buffer, one loop turn per marker segment):

- SOI first, EOI last; before the scan only marker segments that libjpeg knows
  (``FF xx`` and a length that stays inside the blob), at most :data:`MAX_SEGMENTS`;
- quantization tables (``DQT``) and Huffman tables (``DHT``) that fill their segments
  exactly, with valid classes and ids; no Huffman table of over 256 codes, whose code
  lengths overflow or whose DC symbols exceed 15 (libjpeg's "Bogus Huffman table");
- one frame header (``SOF``): 8-bit samples, a size, 1 or 3 components with sampling
  factors 1-4 that divide the largest ones (libjpeg has no fractional upsampling), at
  most 10 blocks per MCU, and quantization tables that the file defines;
- a baseline scan header (``SOS``) naming components of the frame, each once, spectral
  selection 0-63 and no successive approximation;
- compressed data in which every ``FF`` is stuffed (``FF 00``), a restart marker or a
  fill byte, up to the EOI.

What this does not cover (progressive, arithmetic-coded or multi-scan JPEGs, scans that
use the standard Huffman tables of Motion-JPEG, headers of more than
:data:`MAX_SEGMENTS` segments) is returned as a mask, for the caller to decode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["MAX_SEGMENTS", "binary_buffers", "check_structure"]

MAX_SEGMENTS = 64
_BASELINE = (0xC0, 0xC1)  # Huffman-coded sequential: what swm's encoders write
_SOF = (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF)
_DHT, _DQT, _SOS, _DRI = 0xC4, 0xDB, 0xDA, 0xDD
_MAX_BLOCKS = 10  # libjpeg's D_MAX_BLOCKS_IN_MCU
#: the segment markers libjpeg reads before a scan (SOFn, DHT, DAC, SOS, DQT, DNL, DRI,
#: APPn, COM) and the standalone ones, which ``_segment`` flags on their own
_KNOWN = np.zeros(256, dtype=bool)
_KNOWN[[*_SOF, _DHT, 0xCC, _SOS, _DQT, 0xDC, _DRI, *range(0xE0, 0xF0), 0xFE]] = True
_KNOWN[[0x00, 0x01, *range(0xD0, 0xDA)]] = True
_SIZE = "another size"  # its message is made with the sizes


def binary_buffers(array: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """``(offsets [n + 1], data)`` of an Arrow binary array without nulls, in place."""
    import pyarrow as pa

    _, offsets_buffer, data_buffer = array.buffers()
    wide = pa.types.is_large_binary(array.type)
    stored = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)
    offsets = stored[array.offset : array.offset + len(array) + 1].astype(np.int64)
    if data_buffer is None:
        return offsets, np.zeros(0, dtype=np.uint8)
    data: npt.NDArray[np.uint8] = np.frombuffer(data_buffer, dtype=np.uint8)
    return offsets, data


class _Blobs:
    """The blobs of a window, what was found in them so far, and byte access."""

    def __init__(self, offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8]) -> None:
        self.starts, self.ends = offsets[:-1], offsets[1:]
        self.data = data
        self.last = max(int(data.size) - 1, 0)
        count = self.starts.size
        self.bad = np.zeros(count, dtype=bool)
        self.at = np.zeros(count, dtype=np.int64)  # the byte of the first problem
        self.what: dict[int, str] = {}
        # what the tables and the frame header said, per blob
        self.quant = np.zeros(count, dtype=np.int64)  # bit t: quantization table t
        self.huffman = np.zeros(count, dtype=np.int64)  # bit 4 * class + id
        self.needs = np.zeros(count, dtype=np.int64)  # quantization tables the frame uses
        self.frame = np.zeros(count, dtype=bool)
        self.baseline = np.zeros(count, dtype=bool)
        self.height = np.zeros(count, dtype=np.int64)
        self.width = np.zeros(count, dtype=np.int64)
        self.components = np.zeros(count, dtype=np.int64)
        self.ids = np.full((count, 3), -1, dtype=np.int64)

    def byte(self, at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if not self.data.size:
            return np.zeros_like(at)
        return self.data[np.clip(at, 0, self.last)].astype(np.int64)

    def word(self, at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return (self.byte(at) << 8) | self.byte(at + 1)

    def flag(
        self,
        rows: npt.NDArray[np.int64],
        where: npt.NDArray[np.bool_],
        at: npt.NDArray[np.int64],
        what: str,
    ) -> None:
        """Record ``what`` at (absolute) byte ``at`` of ``rows[where]``, unless one was."""
        hit, hit_at = rows[where], at[where]
        new = ~self.bad[hit]
        hit, hit_at = hit[new], hit_at[new]
        if hit.size:
            self.bad[hit] = True
            self.at[hit] = hit_at - self.starts[hit]
            for row in hit.tolist():
                self.what[row] = what

    def good(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of ``rows`` have no problem yet."""
        return ~self.bad[rows]


def check_structure(
    offsets: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    where: str,
    first_row: int,
    shape: tuple[int, int, int] | None = None,
) -> npt.NDArray[np.bool_]:
    """Check the structure of the JPEGs ``data[offsets[i]:offsets[i + 1]]`` (module doc).

    With ``shape`` (``H, W, C``), every frame header must give it. Returns the ``[n]``
    mask of blobs whose scan data this check does not cover (decode those to check them).

    Raises
    ------
    FormatError
        For the first damaged blob: the column (``where``), the row (counted from
        ``first_row``), the byte and what is wrong there.
    """
    blobs = _Blobs(offsets, data)
    starts, ends = blobs.starts, blobs.ends
    count = starts.size
    rows = np.arange(count, dtype=np.int64)
    whole = (ends - starts >= 4) & (blobs.byte(starts) == 0xFF) & (blobs.byte(starts + 1) == 0xD8)
    whole &= (blobs.byte(ends - 2) == 0xFF) & (blobs.byte(ends - 1) == 0xD9)
    blobs.flag(rows, ~whole, starts, "it does not start with FF D8 and end with FF D9 (cut off?)")
    uncovered = np.zeros(count, dtype=bool)
    scan = np.full(count, -1, dtype=np.int64)  # where the compressed data starts
    walking = rows[whole]
    if walking.size > 1:
        # one encoder writes the same header (tables, frame, scan) before every frame:
        # parse the first one, then only the headers that differ from it
        _walk(blobs, walking[:1], scan, uncovered)
        same = _same_header(blobs, walking, scan, uncovered)
        walking = walking[1:][~same[1:]]
    _walk(blobs, walking, scan, uncovered)
    if shape is not None:
        seen = rows[blobs.frame]
        wrong = (blobs.height[seen] != shape[0]) | (blobs.width[seen] != shape[1])
        wrong |= blobs.components[seen] != shape[2]
        blobs.flag(seen, wrong, starts[seen], _SIZE)
    _entropy(blobs, offsets, np.where(uncovered | blobs.bad, -1, scan))
    if blobs.bad.any():
        row = int(np.flatnonzero(blobs.bad)[0])
        if blobs.what[row] == _SIZE and shape is not None:
            raise FormatError(
                f"{where}, row {first_row + row}: the JPEG is {blobs.width[row]}x"
                f"{blobs.height[row]} with {blobs.components[row]} channel(s), but the column's "
                f"first image is {shape[1]}x{shape[0]} with {shape[2]}; every row of an image "
                "column needs one size. Pass images='jpeg' to keep the bytes"
            )
        raise FormatError(
            f"{where}, row {first_row + row}: the JPEG is damaged at byte {blobs.at[row]} of "
            f"{ends[row] - starts[row]}: {blobs.what[row]}; the dataset is damaged or was cut off"
        )
    return uncovered & ~blobs.bad


def _walk(
    blobs: _Blobs,
    rows: npt.NDArray[np.int64],
    scan: npt.NDArray[np.int64],
    uncovered: npt.NDArray[np.bool_],
) -> None:
    """Parse the headers of ``rows``, segment by segment in step, up to their scans."""
    at = blobs.starts[rows] + 2
    for _ in range(MAX_SEGMENTS):
        if not rows.size:
            return
        rows, at = _segment(blobs, rows, at, scan, uncovered)
    uncovered[rows] = True  # more segments than MAX_SEGMENTS before the scan


def _same_header(
    blobs: _Blobs,
    rows: npt.NDArray[np.int64],
    scan: npt.NDArray[np.int64],
    uncovered: npt.NDArray[np.bool_],
) -> npt.NDArray[np.bool_]:
    """Which of ``rows`` begin with the parsed header of ``rows[0]``, byte for byte.

    Those take its findings (frame and scan start) without a parse of their own.
    """
    first = int(rows[0])
    same = np.zeros(rows.size, dtype=bool)
    if blobs.bad[first] or uncovered[first] or scan[first] < 0:
        return same
    size = int(scan[first] - blobs.starts[first])
    reference = blobs.data[blobs.starts[first] : scan[first]]
    windows = np.lib.stride_tricks.sliding_window_view(blobs.data, size)
    room = blobs.ends[rows] - blobs.starts[rows] >= size + 2
    for lo in range(0, rows.size, 8192):  # a few MiB of header copies at a time
        part = slice(lo, lo + 8192)
        fits = np.flatnonzero(room[part]) + lo
        heads = windows[blobs.starts[rows[fits]]]
        same[fits] = (heads == reference).all(axis=1)
    taken = rows[same]
    scan[taken] = blobs.starts[taken] + size
    for name in ("frame", "baseline", "height", "width", "components"):
        values = getattr(blobs, name)
        values[taken] = values[first]
    return same


def _segment(
    blobs: _Blobs,
    rows: npt.NDArray[np.int64],
    at: npt.NDArray[np.int64],
    scan: npt.NDArray[np.int64],
    uncovered: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """One marker segment of each of ``rows`` at ``at``: ``(rows, at)`` of the next."""
    byte = blobs.byte
    marker = byte(at + 1)
    fill = (byte(at) == 0xFF) & (marker == 0xFF)  # a fill byte before a marker
    if fill.any():
        return rows, np.where(fill, at + 1, at)
    standalone = (marker == 0x00) | (marker == 0x01) | ((marker >= 0xD0) & (marker <= 0xD9))
    length = blobs.word(at + 2)
    end = at + 2 + length
    blobs.flag(rows, byte(at) != 0xFF, at, "a marker (FF xx) expected")
    blobs.flag(rows, standalone, at, "a marker that has no place before the scan")
    # libjpeg stops at a marker it does not know, where it would skip an APPn or COM
    blobs.flag(rows, ~_KNOWN[marker], at, "a marker that libjpeg does not know")
    past = (length < 2) | (end > blobs.ends[rows] - 2)
    blobs.flag(rows, past, at, "a segment runs past the end of the JPEG")
    ok = blobs.good(rows)
    rows, at, marker, length, end = rows[ok], at[ok], marker[ok], length[ok], end[ok]
    for kind, check in ((_DQT, _quant_tables), (_DHT, _huffman_tables)):
        part = marker == kind
        if part.any():
            check(blobs, rows[part], at[part], end[part])
    part = marker == _DRI
    blobs.flag(rows[part], length[part] != 4, at[part], "a restart interval of bad length")
    part = np.isin(marker, _SOF)
    if part.any():
        _frame(blobs, rows[part], at[part], marker[part], length[part])
    part = (marker == _SOS) & ~blobs.bad[rows]
    if part.any():
        _scan_header(blobs, rows[part], at[part], length[part], scan, uncovered)
    going = (marker != _SOS) & ~blobs.bad[rows]
    return rows[going], end[going]


def _quant_tables(
    blobs: _Blobs, rows: npt.NDArray[np.int64], at: npt.NDArray[np.int64], end: Any
) -> None:
    """The DQT segments at ``at``: up to 4 tables each, filling the segment exactly."""
    table = at + 4
    inside = table < end
    rows, at, table, end = _tables_begin(blobs, rows, at, table, end, inside, "quantization")
    for _ in range(4):
        if not rows.size:
            return
        head = blobs.byte(table)
        precision, ident = head >> 4, head & 15
        ok = (precision <= 1) & (ident <= 3)
        blobs.flag(rows, ~ok, table, "a bad quantization table")
        rows, at, table, end, precision = rows[ok], at[ok], table[ok], end[ok], precision[ok]
        np.bitwise_or.at(blobs.quant, rows, np.int64(1) << (head[ok] & 15))
        table = table + 1 + 64 * (1 + precision)
        rows, at, table, end = _tables_next(blobs, rows, at, table, end, "quantization")
    blobs.flag(rows, np.ones(rows.size, bool), at, "more quantization tables than fit")


def _huffman_tables(
    blobs: _Blobs, rows: npt.NDArray[np.int64], at: npt.NDArray[np.int64], end: Any
) -> None:
    """The DHT segments at ``at``: up to 8 tables each, filling the segment exactly."""
    table = at + 4
    inside = table < end
    rows, at, table, end = _tables_begin(blobs, rows, at, table, end, inside, "Huffman")
    for _ in range(8):
        if not rows.size:
            return
        head = blobs.byte(table)
        kind, ident = head >> 4, head & 15
        counts = blobs.byte(table[:, None] + 1 + np.arange(16))
        code = np.zeros(rows.size, dtype=np.int64)
        overflow = np.zeros(rows.size, dtype=bool)
        for bits in range(16):  # libjpeg's canonical code assignment: no length overflows
            code = code + counts[:, bits]
            overflow |= code >= (1 << (bits + 1))
            code = code << 1
        total = counts.sum(axis=1)
        ok = (kind <= 1) & (ident <= 3) & (total <= 256) & ~overflow
        ok &= table + 17 + total <= end
        dc = np.flatnonzero(ok & (kind == 0))
        if dc.size:  # a DC symbol is a bit count, 0-15
            first = np.repeat(table[dc] + 17, total[dc])
            within = np.arange(first.size) - np.repeat(np.cumsum(total[dc]) - total[dc], total[dc])
            big = np.zeros(dc.size, dtype=bool)
            owner = np.repeat(np.arange(dc.size), total[dc])
            big[owner[blobs.byte(first + within) > 15]] = True
            ok[dc[big]] = False
        blobs.flag(rows, ~ok, table, "a bad Huffman table")
        rows, at, table, end, total = rows[ok], at[ok], table[ok], end[ok], total[ok]
        np.bitwise_or.at(blobs.huffman, rows, np.int64(1) << (4 * kind[ok] + ident[ok]))
        table = table + 17 + total
        rows, at, table, end = _tables_next(blobs, rows, at, table, end, "Huffman")
    blobs.flag(rows, np.ones(rows.size, bool), at, "more Huffman tables than fit")


def _tables_begin(
    blobs: _Blobs, rows: Any, at: Any, table: Any, end: Any, inside: Any, name: str
) -> tuple[Any, Any, Any, Any]:
    blobs.flag(rows, ~inside, at, f"an empty {name} table segment")
    return rows[inside], at[inside], table[inside], end[inside]


def _tables_next(
    blobs: _Blobs, rows: Any, at: Any, table: Any, end: Any, name: str
) -> tuple[Any, Any, Any, Any]:
    """Rows with more tables in their segment; a table past the segment's end is flagged."""
    blobs.flag(rows, table > end, at, f"a {name} table overruns its segment")
    more = table < end
    return rows[more], at[more], table[more], end[more]


def _frame(
    blobs: _Blobs,
    rows: npt.NDArray[np.int64],
    at: npt.NDArray[np.int64],
    marker: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
) -> None:
    """Take in the SOF segments at ``at`` of ``rows``."""
    byte, word = blobs.byte, blobs.word
    components = byte(at + 9)
    blobs.flag(rows, blobs.frame[rows], at, "a second frame header")
    blobs.flag(rows, length != 8 + 3 * components, at, "a frame header of bad length")
    blobs.flag(rows, byte(at + 4) != 8, at, "not 8-bit samples")
    blobs.flag(rows, (word(at + 5) == 0) | (word(at + 7) == 0), at, "no image size")
    blobs.flag(
        rows,
        (components != 1) & (components != 3),
        at,
        "not 1 or 3 channels; only grayscale and RGB JPEGs are read (pass images='jpeg' "
        "and validate='structure' to keep others unchecked)",
    )
    ok = blobs.good(rows)
    rows, at, marker, components = rows[ok], at[ok], marker[ok], components[ok]
    needs = np.zeros(rows.size, dtype=np.int64)
    ok = np.ones(rows.size, dtype=bool)
    factors = np.ones((rows.size, 3, 2), dtype=np.int64)  # (h, v) per component
    for c in range(3):
        part = components > c
        spec = at + 10 + 3 * c
        sampling, table = byte(spec + 1), byte(spec + 2)
        horizontal, vertical = sampling >> 4, sampling & 15
        good = (horizontal >= 1) & (horizontal <= 4) & (vertical >= 1) & (vertical <= 4)
        ok &= ~part | (good & (table <= 3))
        factors[part, c] = np.stack([horizontal, vertical], axis=1)[part]
        blobs.ids[rows[part], c] = byte(spec)[part]
        needs |= np.where(part, np.int64(1) << np.minimum(table, 3), 0)
    blobs.flag(rows, ~ok, at, "a frame component of bad sampling or table")
    # libjpeg refuses sampling factors that do not divide the largest ones (fractional
    # upsampling) and MCUs of more than 10 blocks; absent components count as (1, 1)
    largest = factors.max(axis=1, keepdims=True)
    fractional = (largest % np.maximum(factors, 1) != 0).any(axis=(1, 2))
    blobs.flag(rows, fractional, at, "chroma sampling factors that libjpeg does not decode")
    blocks = np.where(components > 1, factors.prod(axis=2).sum(axis=1), 1)
    blobs.flag(rows, blocks > _MAX_BLOCKS, at, f"more than {_MAX_BLOCKS} blocks per MCU")
    ok &= blobs.good(rows)
    rows, at, marker, needs = rows[ok], at[ok], marker[ok], needs[ok]
    blobs.frame[rows] = True
    blobs.baseline[rows] = np.isin(marker, _BASELINE)
    blobs.height[rows], blobs.width[rows] = word(at + 5), word(at + 7)
    blobs.components[rows] = byte(at + 9)
    blobs.needs[rows] = needs  # tables may follow the frame header: checked at the scan


def _scan_header(
    blobs: _Blobs,
    rows: npt.NDArray[np.int64],
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    scan: npt.NDArray[np.int64],
    uncovered: npt.NDArray[np.bool_],
) -> None:
    """The SOS header at ``at``: the first scan; its components are the frame's.

    Scans this check cannot follow (not baseline, not all components at once, or using
    the standard tables of Motion-JPEG, which libjpeg-turbo supplies) are ``uncovered``.
    """
    byte = blobs.byte
    blobs.flag(rows, ~blobs.frame[rows], at, "a scan before the frame header")
    missing = (blobs.needs[rows] & ~blobs.quant[rows]) != 0
    blobs.flag(rows, missing, at, "a quantization table the frame uses is not defined")
    keep = blobs.good(rows)
    rows, at, length = rows[keep], at[keep], length[keep]
    scan[rows] = at + 2 + length
    follow = blobs.baseline[rows] & (byte(at + 4) == blobs.components[rows])
    uncovered[rows[~follow]] = True
    rows, at, length = rows[follow], at[follow], length[follow]
    components = byte(at + 4)
    ok = length == 6 + 2 * components
    blobs.flag(rows, ~ok, at, "a scan header of bad length")
    rows, at, components = rows[ok], at[ok], components[ok]
    tail = at + 5 + 2 * components  # Ss, Se, Ah/Al: 0, 63, 0 in a baseline scan
    good = (byte(tail) == 0) & (byte(tail + 1) == 63) & (byte(tail + 2) == 0)
    standard = np.zeros(rows.size, dtype=bool)
    chosen = np.full((rows.size, 3), -1, dtype=np.int64)
    for c in range(3):
        part = components > c
        ident, tables = byte(at + 5 + 2 * c), byte(at + 6 + 2 * c)
        # libjpeg refuses a scan that names one component twice
        good &= ~part | ~(chosen == ident[:, None]).any(axis=1)
        chosen[part, c] = ident[part]
        known = (blobs.ids[rows] == ident[:, None]).any(axis=1)
        good &= ~part | (known & ((tables >> 4) <= 3) & ((tables & 15) <= 3))
        dc = (blobs.huffman[rows] >> np.minimum(tables >> 4, 3)) & 1
        ac = (blobs.huffman[rows] >> (4 + np.minimum(tables & 15, 3))) & 1
        standard |= part & ((dc == 0) | (ac == 0))
    blobs.flag(rows, ~good, at, "a scan header that does not fit the frame")
    uncovered[rows[good & standard]] = True


def _entropy(blobs: _Blobs, offsets: npt.NDArray[np.int64], scan: npt.NDArray[np.int64]) -> None:
    """In the compressed data ``[scan, end - 2)``, every ``FF`` is stuffed, RSTn or fill."""
    checked = np.flatnonzero(scan >= 0)
    if not checked.size:
        return
    data = blobs.data
    empty = scan[checked] >= offsets[checked + 1] - 2
    blobs.flag(checked, empty, scan[checked], "no compressed data")
    lo, hi = int(offsets[0]), int(offsets[-1])
    markers = lo + np.flatnonzero(data[lo : hi - 1] == 0xFF)
    row = np.searchsorted(offsets, markers, side="right") - 1
    start = scan[row]
    inside = (start >= 0) & (markers >= start) & (markers < offsets[row + 1] - 2)
    markers, row = markers[inside], row[inside]
    following = data[markers + 1]
    stray = ~((following == 0x00) | (following == 0xFF) | ((following & 0xF8) == 0xD0))
    if stray.any():
        # markers ascend, so the first stray marker of a row is the first one flagged
        rows, first = np.unique(row[stray], return_index=True)
        blobs.flag(
            rows,
            np.ones(rows.size, dtype=bool),
            markers[stray][first],
            "a marker inside the compressed data (damaged or cut short)",
        )
