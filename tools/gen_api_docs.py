"""Generate ``docs/api.md`` from the signatures and docstrings of the public API.

Usage::

    uv run python tools/gen_api_docs.py           # rewrite docs/api.md
    uv run python tools/gen_api_docs.py --check   # exit 1 if docs/api.md is out of date
    uv run python tools/gen_api_docs.py --thin    # list objects whose docstrings are thin

Everything on the page comes from the code (``inspect`` for signatures, docstrings for
prose, Pydantic ``Field(description=...)`` for model fields, the argparse parser for the
command line); only the section introductions below are written here. The output is
deterministic, and ``tests/docs/test_api_docs_current.py`` fails when the committed page
differs from what this script generates, so the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import enum
import importlib
import inspect
import re
import sys
import textwrap
import types
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api.md"
COMMAND = "uv run python tools/gen_api_docs.py"
WIDTH = 88  # signatures longer than this get one parameter per line

# -- what the page documents ------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """A heading with the objects documented under it (``module:attribute`` paths)."""

    title: str
    intro: str
    objects: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    """A top-level part of the page."""

    title: str
    intro: str
    groups: tuple[Group, ...] = ()


def _facade(*names: str) -> tuple[str, ...]:
    return tuple(f"episodata:{name}" for name in names)


SECTIONS: tuple[Section, ...] = (
    Section(
        "The episodata package",
        "Everything in `episodata.__all__`, grouped by topic, plus the objects its methods "
        "return. `import episodata` imports none of the optional dependencies and reads no "
        "plugin entry points; names outside `__all__` may change without notice.",
        (
            Group(
                "Datasets and episodes",
                "A `Dataset` holds episodes that share one schema, stored by one backend.",
                _facade("Dataset", "Episode"),
            ),
            Group(
                "Schemas and manifests",
                "Pydantic models: a schema is authoritative once a dataset exists, and the "
                "manifest is what `manifest.json` holds (see [formats.md](formats.md)).",
                (
                    *_facade("FieldSpec", "DatasetSchema", "Manifest"),
                    "episodata_core.manifest:Provenance",
                    "episodata_core.manifest:PluginVersion",
                ),
            ),
            Group(
                "Writers",
                "Obtained from the `Dataset`; every step is validated before anything is "
                "written, so a rejected step leaves the episode unchanged.",
                _facade("EpisodeWriter", "ActionOutEpisodeWriter", "VectorEpisodeWriter"),
            ),
            Group(
                "Transition views",
                "Reads return views over row buffers of L + 1 rows: `obs` and `next_obs` "
                "are overlapping slices of one buffer, never copies. `Segment`, `Batch` and "
                "`Transition` share the accessors of `TransitionView`.",
                (
                    "episodata_core.views:TransitionView",
                    *_facade("Segment", "Batch", "Transition", "FieldGroup", "Fields"),
                ),
            ),
            Group(
                "Sampling",
                "The objects behind `Dataset.segments()` and `Dataset.segment_stream()`, and "
                "the built-in samplers (registered in `episodata.samplers`).",
                (
                    "episodata_core.sampling:SegmentDataset",
                    "episodata_core.sampling:SegmentStream",
                    "episodata_core.sampling:SegmentIndex",
                    "episodata_core.sampling:UniformSampler",
                    "episodata_core.sampling:EpisodeUniformSampler",
                    "episodata_core.sampling:WithoutReplacementSampler",
                ),
            ),
            Group(
                "Reads by field key",
                "The 0.2 API's direct reads: backends answer `read_fields(keys, selections)` "
                "and `episode_length(id)` (see `SupportsReadFields`).",
                (
                    *_facade("Selection"),
                    "episodata_core.selection:read_fields",
                    "episodata_core.selection:episode_length",
                ),
            ),
            Group("Statistics", "", _facade("FieldStats")),
            Group(
                "Type aliases",
                "Names that appear in the signatures above.",
                (
                    "episodata_core.schema:Role",
                    "episodata_core.normalize:Alignment",
                    "episodata_core.writers:AutoresetMode",
                    "episodata_core.sampling.index:Pad",
                    "episodata_core.sampling.index:EpisodeFilter",
                ),
            ),
            Group(
                "Import and export",
                "Drivers that run importer and exporter plugins by registered name.",
                (
                    *_facade("import_dataset", "export_datasets", "ImportReport"),
                    "episodata_core.transfer:FlagCounts",
                    "episodata_core.transfer:FieldReport",
                    "episodata_core.transfer:ImportWarningRecord",
                    "episodata_core.transfer:ImportResult",
                ),
            ),
            Group(
                "Pipelines",
                "A pipeline is one source, an optional store and any number of exports, "
                "from a TOML file or built as models.",
                (
                    *_facade("Pipeline"),
                    "episodata_core.pipeline:PipelineResult",
                    "episodata_core.pipeline:PipelineConfig",
                    "episodata_core.pipeline:ImportSource",
                    "episodata_core.pipeline:DatasetSource",
                    "episodata_core.pipeline:StoreConfig",
                    "episodata_core.pipeline:ExportStep",
                    "episodata_core.pipeline:load_config",
                    "episodata_core.pipeline:Executor",
                    "episodata_core.pipeline:LocalExecutor",
                    "episodata_core.pipeline:Step",
                ),
            ),
            Group(
                "Errors and warnings",
                "Every error subclasses `EpisodataError` and the matching built-in "
                "exception, so `except ValueError` keeps working. All live in "
                "`episodata_core.errors`.",
                (
                    *_facade(
                        "EpisodataError",
                        "SchemaError",
                        "ArgumentError",
                        "FieldNotFoundError",
                        "DatasetStateError",
                        "MissingDependencyError",
                        "FormatError",
                        "MissingFilterError",
                        "PartialFileError",
                        "IntegrityError",
                        "NonFiniteError",
                        "PluginError",
                        "PluginNotFoundError",
                    ),
                    "episodata_core.errors:PluginDisabledError",
                    *_facade(
                        "PluginConflictError",
                        "EpisodataWarning",
                        "EpisodataPluginWarning",
                        "EpisodataImportWarning",
                        "EpisodataDeprecationWarning",
                    ),
                ),
            ),
            Group("Version", "", _facade("__version__")),
        ),
    ),
    Section(
        "episodata.utils",
        "Helpers that live in optional plugins. `from episodata.utils import name` imports "
        "the plugin on first use; a missing plugin raises `MissingDependencyError` with the "
        "install command.",
        (
            Group(
                "Gymnasium (`episodata[gym]`)",
                "",
                ("episodata_gym:schema_from_gym_spaces", "episodata_gym:record_episodes"),
            ),
            Group(
                "PyTorch (`episodata[torch]`)",
                "",
                ("episodata_torch:batch_to_tensordict", "episodata_torch:tensordict_to_episodes"),
            ),
        ),
    ),
    Section(
        "Plugin contract",
        "What backends, samplers, importers and exporters provide, in "
        "`episodata_core.protocols`. Backends speak in rows: an episode of T transitions "
        "has T + 1 rows, and fields are addressed by qualified key. "
        "[plugins.md](plugins.md) shows how to write and publish one.",
        (
            Group(
                "Protocols",
                "",
                tuple(
                    f"episodata_core.protocols:{name}"
                    for name in (
                        "StorageBackend",
                        "SupportsAddEpisodes",
                        "SupportsFlush",
                        "SupportsPersistence",
                        "PersistentBackend",
                        "SupportsReadFields",
                        "SupportsVerify",
                        "supports_persistence",
                        "default_prefetch",
                        "DEFAULT_PREFETCH",
                        "OPTIONAL_FLAGS",
                        "Sampler",
                        "Importer",
                        "Exporter",
                        "EpisodeTable",
                        "EpisodeRows",
                        "GatherRequest",
                        "Rows",
                    )
                ),
            ),
            Group(
                "Helpers for importer authors",
                "Warnings, reports, source records and optional dependencies, in "
                "`episodata_core.importing`.",
                tuple(
                    f"episodata_core.importing:{name}"
                    for name in (
                        "WarningLog",
                        "PendingEpisodes",
                        "field_reports",
                        "file_sha256",
                        "flag_counts",
                        "require_module",
                        "source_record",
                    )
                ),
            ),
            Group(
                "Helpers for exporter authors",
                "A folder written aside and published whole, in `episodata_core.exporting`.",
                tuple(
                    f"episodata_core.exporting:{name}" for name in ("stage_folder", "StagedFolder")
                ),
            ),
            Group(
                "Helpers for plugin authors",
                "The modules a plugin may import are `episodata_core.authoring.PLUGIN_SURFACE`; "
                "the helpers they share live in `episodata_core.authoring`.",
                tuple(
                    f"episodata_core.authoring:{name}"
                    for name in ("coerce_options", "Growable", "check_rows", "check_fields")
                ),
            ),
            Group(
                "Helpers for command authors",
                "A verb of the `episodata` command, named by an `episodata.commands` entry "
                "point, in `episodata_core.commands`.",
                tuple(f"episodata_core.commands:{name}" for name in ("Command", "Arg", "arg")),
            ),
            Group(
                "Registry",
                "Entry-point discovery and lookup, in `episodata_core.registry`. Nothing is "
                "read at import; the first lookup reads the entry points once.",
                tuple(
                    f"episodata_core.registry:{name}"
                    for name in (
                        "get_backend",
                        "get_sampler",
                        "get_importer",
                        "get_exporter",
                        "get_command",
                        "list_plugins",
                        "PluginInfo",
                        "register_backend",
                        "register_sampler",
                        "register_importer",
                        "register_exporter",
                        "register_command",
                        "unregister",
                        "prefer_plugin",
                        "refresh_plugins",
                        "load_hook_plugins",
                    )
                ),
            ),
            Group(
                "Hooks",
                "Lifecycle events through pluggy, in `episodata_core.hooks`.",
                tuple(
                    f"episodata_core.hooks:{name}"
                    for name in (
                        "HookSpecs",
                        "hookimpl",
                        "register_hooks",
                        "unregister_hooks",
                        "get_plugin_manager",
                        "call_hook",
                    )
                ),
            ),
        ),
    ),
    Section(
        "Built-in plugins",
        "The plugins that ship with episodata, registered through entry points exactly like "
        "third-party ones. Their `Options` models list the keyword arguments that "
        "`Dataset.create(..., **options)`, `import_dataset(..., **options)` and "
        "`export_datasets(..., **options)` accept.",
        (
            Group(
                "memory backend",
                "",
                ("episodata_memory:MemoryBackend", "episodata_memory:MemoryOptions"),
            ),
            Group(
                "zarr backend",
                "On-disk layout: [formats.md](formats.md#the-zarr-layout).",
                (
                    "episodata_zarr:ZarrBackend",
                    "episodata_zarr:ZarrOptions",
                    "episodata_zarr:CodecName",
                ),
            ),
            Group(
                "npz_directory backend",
                "On-disk layout: [formats.md](formats.md#the-npz-directory-layout).",
                ("episodata_npz:NpzDirectoryBackend", "episodata_npz:NpzDirectoryOptions"),
            ),
            Group(
                "d4rl importer",
                "",
                (
                    "episodata_d4rl:D4RLImporter",
                    "episodata_d4rl:D4RLOptions",
                    "episodata_d4rl:FieldNames",
                    "episodata_d4rl:D4RLReport",
                ),
            ),
            Group(
                "lewm importer",
                "",
                (
                    "episodata_lewm:LeWMImporter",
                    "episodata_lewm:LeWMOptions",
                    "episodata_lewm:EpisodeSlice",
                    "episodata_lewm:LeWMReport",
                ),
            ),
            Group(
                "minari importer",
                "",
                ("episodata_minari:MinariImporter", "episodata_minari:MinariOptions"),
            ),
            Group(
                "offset-segments exporter and importer",
                "Archive layout: [formats.md](formats.md#offset-segment-archives).",
                (
                    "episodata_segments:OffsetSegmentsExporter",
                    "episodata_segments:OffsetSegmentsExportOptions",
                    "episodata_segments:ExportReport",
                    "episodata_segments:EnvironmentReport",
                    "episodata_segments:OffsetSegmentsImporter",
                    "episodata_segments:OffsetSegmentsImportOptions",
                ),
            ),
            Group("HTML reports (`episodata[report]`)", "", ("episodata_report:render_report",)),
        ),
    ),
    Section(
        "Testing kit",
        "Base test classes that a plugin's own tests subclass, in `episodata_core.testing` "
        "(needs pytest), and the fixtures of its pytest plugin "
        "(`-p episodata_core.testing.pytest_plugin`). A subclass sets the class attribute "
        "and overrides the fixtures it needs; every `test_*` method then runs against the "
        "plugin.",
        (
            Group(
                "Base classes",
                "",
                tuple(
                    f"episodata_core.testing:{name}"
                    for name in (
                        "BackendTests",
                        "PersistentBackendTests",
                        "SamplerTests",
                        "CommandTests",
                        "example_schema",
                        "example_rows",
                    )
                ),
            ),
            Group(
                "Packaging checks",
                "The checks every kit class runs, in `episodata_core.testing.packaging`.",
                tuple(
                    f"episodata_core.testing.packaging:{name}"
                    for name in (
                        "PackagingTests",
                        "check_entry_point_discoverable",
                        "check_entry_point_is_light",
                    )
                ),
            ),
            Group(
                "Hypothesis strategies",
                "Schemas and episodes for property tests, in "
                "`episodata_core.testing.strategies` (needs Hypothesis).",
                tuple(
                    f"episodata_core.testing.strategies:{name}"
                    for name in ("schemas", "episodes", "field_values")
                ),
            ),
            Group(
                "pytest plugin",
                "",
                tuple(
                    f"episodata_core.testing.pytest_plugin:{name}"
                    for name in (
                        "isolated_registry",
                        "add_dist_path",
                        "hermetic_registry",
                        "isolated_plugins",
                        "DistPaths",
                    )
                ),
            ),
        ),
    ),
)

# classes users do not construct themselves, and where they come from
OBTAINED_FROM: dict[str, str] = {
    "Dataset": "Created with `Dataset.create()`, `Dataset.open()` or `Dataset.from_episodes()`.",
    "Episode": "Obtained from `Dataset.episode(i)` or by iterating over a `Dataset`.",
    "EpisodeWriter": "Obtained from `Dataset.new_episode()` or `Dataset.resume_episode()`.",
    "ActionOutEpisodeWriter": "Obtained from `Dataset.new_action_out_episode()`.",
    "VectorEpisodeWriter": "Obtained from `Dataset.new_vector_episodes()`.",
    "TransitionView": "Not created directly: the base class of `Segment`, `Batch` and "
    "`Transition`, whose accessors are documented here.",
    "Segment": "Obtained from `Episode.read()`, `Episode.segment()` or `SegmentDataset[i]`.",
    "Batch": "Obtained from `SegmentStream.sample()` (or iterating a stream) and "
    "`SegmentDataset.__getitems__()`.",
    "Transition": "Obtained from `Episode.step()` or `Dataset.sample_transitions()`.",
    "FieldGroup": "Returned by the role accessors of a dict-shaped role (`segment.obs`, "
    "`segment.action`, ...).",
    "SegmentDataset": "Obtained from `Dataset.segments()`.",
    "SegmentStream": "Obtained from `Dataset.segment_stream()`.",
    "MemoryBackend": "Created by the core: `Dataset.create(schema)` (no path) uses it.",
    "ZarrBackend": 'Created by the core: `Dataset.create(schema, path)` (or `backend="zarr"`) '
    "and `Dataset.open(path)` use it.",
    "NpzDirectoryBackend": "Created by the core: `Dataset.create(schema, path, "
    'backend="npz_directory")` and `Dataset.open(path)` use it.',
}

DUNDERS = ("__len__", "__getitem__", "__getitems__", "__iter__", "__contains__", "__enter__")
SKIPPED_MEMBERS = frozenset({"model_config", "model_post_init"})

# -- docstrings to Markdown ---------------------------------------------------------------

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_LIST_SECTIONS = {"Parameters", "Returns", "Yields", "Raises", "Warns", "Attributes"}
_SECTION_TITLES = _LIST_SECTIONS | {
    "Examples",
    "Notes",
    "See Also",
    "Environment variables",
    "Fixtures",
}


def _inline(text: str) -> str:
    """RST inline markup to Markdown: literals, cross references; ``<`` outside code."""

    def role(match: re.Match[str]) -> str:
        target = match.group(1)
        short = target.rsplit(".", 1)[-1] if match.group(0).find("~") >= 0 else target
        return f"`{short}`"

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(r"`\1`", text)
    # escape '<' outside code spans so Markdown does not read it as HTML
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;")
    return "`".join(parts)


def _is_underline(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 3 and set(stripped) == {"-"}


def _split_sections(doc: str) -> list[tuple[str | None, list[str]]]:
    lines = doc.splitlines()
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    i = 0
    while i < len(lines):
        line = lines[i]
        if (
            i + 1 < len(lines)
            and _is_underline(lines[i + 1])
            and line.strip() in _SECTION_TITLES
            and not line.startswith(" ")
        ):
            sections.append((line.strip(), []))
            i += 2
            continue
        sections[-1][1].append(line)
        i += 1
    return sections


def _prose(lines: list[str]) -> list[str]:
    """Paragraphs with RST literal blocks (``::``), simple tables and doctest lines fenced."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i].strip())
                i += 1
            out += ["```text", *block, "```"]
            continue
        if stripped and set(stripped.replace(" ", "")) == {"="}:
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            out += ["```text", *textwrap.dedent("\n".join(block)).splitlines(), "```"]
            continue
        if stripped.endswith("::"):
            if stripped != "::":  # "Text::" introduces the block with "Text:"
                out.append(_inline(line.rstrip()[:-1]))
            i += 1
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            out += ["", "```text", *textwrap.dedent("\n".join(block)).splitlines(), "```", ""]
            continue
        out.append(_inline(line.rstrip()) if stripped else "")
        i += 1
    return out


def _entries(title: str, lines: list[str]) -> list[str]:
    """A numpydoc list section (Parameters, Raises, ...) as a Markdown list."""
    items: list[tuple[str, list[str]]] = []
    for line in lines:
        if not line.strip():
            if items:
                items[-1][1].append("")
            continue
        if not line.startswith((" ", "\t")):
            items.append((line.strip(), []))
        elif items:
            items[-1][1].append(line.strip())
        else:
            items.append(("", [line.strip()]))
    out = [f"**{title}**", ""]
    for head, body in items:
        text = " ".join(part for part in body if part)
        if not head:
            out.append(f"- {_inline(text)}")
            continue
        name, _, kind = head.partition(" : ")
        names = ", ".join(f"`{n.strip()}`" for n in name.split(","))
        label = f"{names} ({_inline(kind.strip())})" if kind.strip() else names
        out.append(f"- {label}: {_inline(text)}" if text else f"- {label}")
    return out


def render_docstring(doc: str | None) -> list[str]:
    """A numpydoc docstring as Markdown lines."""
    if not doc:
        return []
    out: list[str] = []
    for title, lines in _split_sections(inspect.cleandoc(doc)):
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            continue
        if out:
            out.append("")
        if title is None:
            out += _prose(lines)
        elif title in _LIST_SECTIONS or title in {"Fixtures", "Environment variables"}:
            out += _entries(title, lines)
        elif title == "Examples":
            out += ["**Examples**", "", "```text", *textwrap.dedent("\n".join(lines)).split("\n")]
            out.append("```")
        else:
            out += [f"**{title}**", "", *_prose(lines)]
    return out


# -- signatures ---------------------------------------------------------------------------


def _annotation(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation
    return inspect.formatannotation(annotation)


def _default(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    text = repr(value)
    return "..." if " at 0x" in text else text


def format_signature(name: str, func: Any, *, drop_first: bool = False) -> str:
    """``name(params) -> return``; one parameter per line when it gets long."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params = list(signature.parameters.values())
    if drop_first and params:
        params = params[1:]
    parts: list[str] = []
    seen_keyword_only = False
    for index, param in enumerate(params):
        if param.kind is param.KEYWORD_ONLY and not seen_keyword_only:
            parts.append("*")
        if param.kind in (param.KEYWORD_ONLY, param.VAR_POSITIONAL):
            seen_keyword_only = True
        prefix = {param.VAR_POSITIONAL: "*", param.VAR_KEYWORD: "**"}.get(param.kind, "")
        text = prefix + param.name
        annotation = _annotation(param.annotation)
        if annotation:
            text += f": {annotation}"
        if param.default is not param.empty:
            text += f" = {_default(param.default)}" if annotation else f"={_default(param.default)}"
        parts.append(text)
        following = params[index + 1] if index + 1 < len(params) else None
        if param.kind is param.POSITIONAL_ONLY and (
            following is None or following.kind is not param.POSITIONAL_ONLY
        ):
            parts.append("/")
    returns = _annotation(signature.return_annotation)
    tail = f" -> {returns}" if returns else ""
    one_line = f"{name}({', '.join(parts)}){tail}"
    if len(one_line) <= WIDTH:
        return one_line
    inner = "".join(f"    {part},\n" for part in parts)
    return f"{name}(\n{inner}){tail}"


# -- attribute docstrings (a string right after an assignment) ---------------------------


def _assignments(obj: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Attribute docstrings, and the source text of each assigned value, of a module or class."""
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return {}, {}
    tree = ast.parse(source)
    body = tree.body
    if inspect.isclass(obj) and body and isinstance(body[0], ast.ClassDef):
        body = body[0].body
    docs: dict[str, str] = {}
    values: dict[str, str] = {}
    for node, following in zip(body, [*body[1:], None], strict=True):
        target: str | None = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target = node.target.id
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            target = node.targets[0].id
        value = getattr(node, "value", None)
        if target is not None and value is not None:
            values[target] = ast.get_source_segment(source, value) or ""
        if (
            target is not None
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[target] = following.value.value
    return docs, values


def _attribute_docs(obj: Any) -> dict[str, str]:
    return _assignments(obj)[0]


# -- the page -----------------------------------------------------------------------------


@dataclass
class Page:
    """The Markdown being built, and the objects whose docstrings are thin."""

    lines: list[str] = field(default_factory=list)
    thin: list[str] = field(default_factory=list)

    def add(self, *lines: str) -> None:
        """Append lines."""
        self.lines.extend(lines)

    def doc(self, where: str, doc: str | None, *, minimum_words: int = 4) -> None:
        """Append a rendered docstring; remember it when it says (almost) nothing."""
        if minimum_words and (not doc or len(doc.split()) < minimum_words):
            self.thin.append(f"{where}: {'no docstring' if not doc else repr(doc.strip())}")
        rendered = render_docstring(doc)
        if rendered:
            self.add("", *rendered)


def _load(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", title.lower())
    return text.replace(" ", "-")


def _is_pydantic(obj: Any) -> bool:
    return inspect.isclass(obj) and hasattr(obj, "model_fields") and hasattr(obj, "model_dump")


def _is_fixture(obj: Any) -> bool:
    return type(obj).__name__ == "FixtureFunctionDefinition"


def _fixture_function(obj: Any) -> Any:
    return obj._get_wrapped_function()


def _class_annotations(cls: type) -> dict[str, str]:
    merged: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        for name, value in vars(base).get("__annotations__", {}).items():
            merged[name] = _annotation(value)
    return merged


def _model_default(info: Any) -> str:
    from pydantic_core import PydanticUndefined

    if info.default_factory is not None:
        factory = info.default_factory
        if factory in (dict, list, tuple, set):
            return f"`{factory()!r}`"
        if inspect.isclass(factory):
            return f"`{factory.__name__}()`"
        return "computed"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{_default(info.default)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _model_fields(page: Page, cls: type) -> None:
    annotations = _class_annotations(cls)
    rows = []
    for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
        shown = info.alias or name
        kind = annotations.get(name, _annotation(info.annotation))
        description = info.description or ""
        rows.append(
            f"| `{shown}` | `{_cell(kind)}` | {_cell(_model_default(info))} | "
            f"{_cell(_inline(description))} |"
        )
        if not description:
            page.thin.append(
                f"{cls.__module__}.{cls.__qualname__}.{name}: field without description"
            )
    if rows:
        page.add("", "| field | type | default | description |", "|---|---|---|---|", *rows)


def _dataclass_fields(page: Page, cls: type) -> None:
    docs = _attribute_docs(cls)
    rows = []
    for item in dataclasses.fields(cls):
        if item.default is not dataclasses.MISSING:
            default = f"`{_default(item.default)}`"
        elif item.default_factory is not dataclasses.MISSING:
            factory = item.default_factory
            default = f"`{factory()!r}`" if factory in (dict, list, tuple, set) else "computed"
        else:
            default = "required"
        kind = _annotation(item.type)
        note = _inline(docs.get(item.name, ""))
        rows.append(f"| `{item.name}` | `{_cell(kind)}` | {default} | {_cell(note)} |")
    page.add("", "| field | type | default | description |", "|---|---|---|---|", *rows)


def _members(cls: type) -> list[tuple[str, Any]]:
    """The class's own members, then those of its private bases (method groups).

    A private base (``_DatasetReads``) is how a class keeps its methods in concept
    modules; what it defines is the class's own API, so it is listed with the class:
    the deepest base first (the state the others build on), then up the
    method-resolution order. A name is listed once, from the class it resolves to;
    public bases are documented on their own.
    """
    owners = [cls, *(b for b in reversed(cls.__mro__[1:-1]) if b.__name__.startswith("_"))]
    members = []
    for owner in owners:
        for name, value in vars(owner).items():
            if name in SKIPPED_MEMBERS or inspect.getattr_static(cls, name) is not value:
                continue
            if name.startswith("_") and name not in DUNDERS:
                continue
            members.append((name, value))
    return members


def _member_kind(value: Any) -> str:
    if isinstance(value, property | cached_property):
        return "property"
    if isinstance(value, classmethod):
        return "classmethod"
    if isinstance(value, staticmethod):
        return "staticmethod"
    if _is_fixture(value):
        return "fixture"
    if inspect.isfunction(value):
        return "method"
    return "attribute"


def _document_member(page: Page, owner: str, cls: type, name: str, value: Any) -> None:
    kind = _member_kind(value)
    where = f"{owner}.{name}"
    if kind == "property":
        function = value.fget if isinstance(value, property) else value.func
        returns = _annotation(inspect.signature(function).return_annotation)
        page.add("", f"#### `{where}`", "", f"*property* `{name}: {returns}`")
        page.doc(where, function.__doc__, minimum_words=2)
        return
    if kind == "attribute" and isinstance(value, types.MemberDescriptorType):
        # a __slots__ member: an instance attribute, which the class docstring describes
        page.add("", f"- *instance attribute* `{name}` (see the class description)")
        return
    if kind == "attribute":
        if inspect.isclass(value) and _is_pydantic(value):
            shown = f"{name} = {value.__name__}"
        else:
            shown = f"{name} = {_default(value)}"
        annotation = _class_annotations(cls).get(name)
        if annotation:
            shown = f"{name}: {annotation} = " + shown.split(" = ", 1)[1]
        page.add("", f"- *class attribute* `{shown}`")
        doc = _attribute_docs(cls).get(name)
        if doc:
            page.add(f"  {_inline(' '.join(doc.split()))}")
        return
    function = {
        "classmethod": lambda v: v.__func__,
        "staticmethod": lambda v: v.__func__,
        "fixture": _fixture_function,
    }.get(kind, lambda v: v)(value)
    drop_first = kind != "staticmethod"
    signature = format_signature(name, function, drop_first=drop_first)
    label = "" if kind == "method" else f"*{kind}* "
    page.add("", f"#### `{where}`", "")
    if label:
        page.add(label.strip(), "")
    page.add("```text", signature, "```")
    minimum = 0 if name.startswith("test_") or name in DUNDERS else 4
    page.doc(where, function.__doc__, minimum_words=minimum)


def _document_class(page: Page, title: str, cls: type, where: str) -> None:
    bases = [
        b
        for b in cls.__bases__
        if b is not object
        and b.__name__ not in ("Generic", "Protocol")
        and not b.__name__.startswith("_")
    ]
    page.add(f"### `{title}`", "")
    kind = "class"
    if issubclass(cls, BaseException):
        kind = "exception"
    elif getattr(cls, "_is_protocol", False):
        kind = "protocol"
    elif _is_pydantic(cls):
        kind = "Pydantic model"
    elif dataclasses.is_dataclass(cls):
        kind = "dataclass"
    base_text = ", ".join(f"`{b.__name__}`" for b in bases)
    summary = f"*{kind}* `{where}`"
    if base_text:
        summary += f"; bases: {base_text}"
    page.add(summary)
    if cls.__name__ in OBTAINED_FROM:
        page.add("", OBTAINED_FROM[cls.__name__])
    elif "__init__" in vars(cls) and not issubclass(cls, BaseException):
        constructor = format_signature(title, vars(cls)["__init__"], drop_first=True)
        page.add("", "```text", constructor.removesuffix(" -> None"), "```")
    page.doc(title, cls.__doc__)
    if _is_pydantic(cls):
        _model_fields(page, cls)
    elif dataclasses.is_dataclass(cls):
        _dataclass_fields(page, cls)
    if issubclass(cls, BaseException):
        return
    tests: list[str] = []
    special: list[str] = []
    for name, value in _members(cls):
        if name.startswith("test_") and inspect.isfunction(value):
            tests.append(name)
            continue
        if name in DUNDERS and inspect.isfunction(value) and not value.__doc__:
            special.append(format_signature(name, value, drop_first=True))
            continue
        if dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}:
            continue
        _document_member(page, title, cls, name, value)
    if special:
        page.add("", "**Special methods**: " + ", ".join(f"`{s}`" for s in special) + ".")
    if tests:
        page.add("", f"**Tests** ({len(tests)}): " + ", ".join(f"`{t}`" for t in tests) + ".")


def _document(page: Page, path: str) -> None:
    obj = _load(path)
    module_name, _, name = path.partition(":")
    if inspect.isclass(obj):
        _document_class(page, name, obj, f"{module_name}.{name}")
    elif _is_fixture(obj):
        page.add(f"### `{name}`", "", "*fixture*", "", "```text")
        page.add(format_signature(name, _fixture_function(obj)), "```")
        page.doc(name, obj.__doc__)
    elif callable(obj) and (inspect.isfunction(obj) or hasattr(obj, "__wrapped__")):
        page.add(f"### `{name}`", "", "```text", format_signature(name, obj), "```")
        page.doc(name, inspect.getdoc(obj))
    else:
        docs, values = _assignments(_defining_module(module_name, name, obj))
        if name == "__version__":
            page.add(f"### `{name}`", "", f"*value* `{module_name}.{name}`: the version string")
            page.add("", "The version of episodata-core, e.g. `'0.3.0'`.")
            return
        shown = " ".join(values.get(name, type(obj).__name__).split())
        page.add(f"### `{name}`", "", f"*value* `{module_name}.{name} = {shown}`")
        page.doc(name, docs.get(name), minimum_words=2)


def _defining_module(module_name: str, name: str, obj: Any) -> Any:
    """The module that assigns ``name`` (a package may only re-export it)."""
    package = module_name.split(".", 1)[0]
    candidates = [importlib.import_module(module_name)]
    candidates += [
        module
        for key, module in sorted(sys.modules.items())
        if key.startswith(package + ".") and getattr(module, name, None) is obj
    ]
    for module in candidates:
        if name in _assignments(module)[1]:
            return module
    return candidates[0]


def _cli(page: Page) -> None:
    from episodata_core import cli

    parser = cli._build_parser()
    subparsers = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )

    def formatter(prog: str) -> argparse.HelpFormatter:
        return argparse.HelpFormatter(prog, width=WIDTH, max_help_position=32)

    page.add(
        "## Command line",
        "",
        "The `episodata` command (`python -m episodata_core.cli` works too). Exit codes: 0 "
        "on success, 1 for an episodata error (one line on stderr, no traceback), 2 for a "
        "usage error. `episodata --version` prints the versions of episodata-core and "
        "episodata. `report` and `quickstart` come from the episodata-report and "
        "episodata-gym plugins (`episodata.commands` entry points); `episodata --help` "
        "lists the verbs of every installed plugin.",
    )
    # the core's verbs and those of the distributions in plugins/; a contrib or third-party
    # verb (episodata.commands) is documented by its own distribution
    workspace = {folder.name for folder in (ROOT / "plugins").iterdir()}
    documented = {
        verb.name
        for verb in cli._verbs()
        if verb.origin is None or verb.origin.split()[0] in workspace
    }
    for name, sub in subparsers.choices.items():
        if name not in documented:
            continue
        sub.formatter_class = formatter
        page.add("", f"### `episodata {name}`", "")
        if sub.description:
            page.add(_inline(sub.description), "")
        page.add("```text", *sub.format_usage().strip().splitlines(), "```", "")
        page.add("| argument | meaning | default |", "|---|---|---|")
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(action.option_strings) or (action.metavar or action.dest)
            meaning = action.help or ""
            if action.choices:
                meaning += f" (one of: {', '.join(str(c) for c in action.choices)})"
            default = action.default
            hidden = default is None or default is False or default is argparse.SUPPRESS
            shown = "" if hidden else f"`{default}`"
            page.add(f"| `{_cell(str(flags))}` | {_cell(_inline(meaning))} | {shown} |")


def render() -> tuple[str, list[str]]:
    """The whole page, and the list of objects whose docstrings are thin."""
    page = Page()
    page.add(
        "<!-- Generated by tools/gen_api_docs.py from signatures and docstrings. Do not "
        f"edit by hand: change the docstrings, then run `{COMMAND}`. -->",
        "",
        "# API reference",
        "",
        "Every public type and function of episodata, with its signature and docstring. "
        "Shapes use `T` for the transitions of an episode, `L` for a segment's transitions, "
        "`B` for the batch size and `...` for a field's per-step shape. For a guided tour "
        "see [getting_started.md](getting_started.md); for files on disk, "
        "[formats.md](formats.md).",
        "",
        "## Contents",
        "",
    )
    for section in SECTIONS:
        page.add(f"- [{section.title}](#{_anchor(section.title)})")
        for group in section.groups:
            page.add(f"  - [{group.title}](#{_anchor(group.title)})")
    page.add("- [Command line](#command-line)")
    for section in SECTIONS:
        page.add("", f"## {section.title}", "", section.intro)
        for group in section.groups:
            page.add("", f"### {group.title}")
            if group.intro:
                page.add("", group.intro)
            for path in group.objects:
                page.add("")
                _document_sub(page, path)
    page.add("")
    _cli(page)
    text = "\n".join(page.lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
    return text, page.thin


def _document_sub(page: Page, path: str) -> None:
    """Document one object one heading level below its group (members one more)."""
    start = len(page.lines)
    _document(page, path)
    for i in range(start, len(page.lines)):
        line = page.lines[i]
        if line.startswith(("### ", "#### ")):
            page.lines[i] = "#" + line


def main(argv: list[str] | None = None) -> int:
    """Write docs/api.md, or check it (``--check``), or list thin docstrings (``--thin``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/api.md differs")
    parser.add_argument("--thin", action="store_true", help="list thin docstrings")
    args = parser.parse_args(argv)
    text, thin = render()
    if args.thin:
        print("\n".join(thin))
        return 0
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current == text:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(), text.splitlines(), "docs/api.md", "generated", lineterm=""
        )
        print("\n".join(list(diff)[:80]))
        print(f"docs/api.md is out of date; run: {COMMAND}", file=sys.stderr)
        return 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
