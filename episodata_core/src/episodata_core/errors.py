"""Every exception and warning class of episodata, in one place so users can filter them.

Errors subclass both :class:`EpisodataError` and the matching built-in exception, so
``except ValueError`` keeps working for callers that do not know episodata.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "DatasetStateError",
    "EpisodataDeprecationWarning",
    "EpisodataError",
    "EpisodataImportWarning",
    "EpisodataPluginWarning",
    "EpisodataWarning",
    "FieldNotFoundError",
    "FormatError",
    "IntegrityError",
    "MissingDependencyError",
    "MissingFilterError",
    "NonFiniteError",
    "PartialFileError",
    "PluginConflictError",
    "PluginDisabledError",
    "PluginError",
    "PluginNotFoundError",
    "SchemaError",
    "StorageError",
    "UnsupportedSpaceError",
]


class EpisodataError(Exception):
    """Base class of every error episodata raises on purpose."""


class SchemaError(EpisodataError, ValueError):
    """Data or a schema declaration does not satisfy the dataset schema."""


class ArgumentError(SchemaError):
    """An argument of a call is out of range or of the wrong kind (``batch_size=0``).

    Not a problem of the data or the schema: the call itself is wrong, and the message
    names the argument. It subclasses :class:`SchemaError` only so that code written
    when these were raised as ``SchemaError`` keeps catching them; catch
    ``ArgumentError`` (or ``ValueError``) in new code.
    """


class UnsupportedSpaceError(SchemaError, NotImplementedError):
    """A Gymnasium space has no fixed per-step shape and dtype (``Text``, ``Graph``, ...).

    Also a ``NotImplementedError``, as episodata 0.2 raised it, so code that caught that
    keeps working.
    """


class FieldNotFoundError(EpisodataError, KeyError):
    """A field, role or group name does not exist where it was looked up."""

    def __str__(self) -> str:
        # KeyError.__str__ shows the repr of its argument; a sentence reads better.
        return str(self.args[0]) if self.args else ""


class DatasetStateError(EpisodataError, RuntimeError):
    """An operation does not fit the current state (a closed writer, a finalized episode)."""


class MissingDependencyError(EpisodataError, ImportError):
    """An optional dependency that a feature needs is not installed."""


class PluginError(EpisodataError, RuntimeError):
    """A plugin could not be loaded or does not satisfy its contract."""


class PluginNotFoundError(PluginError, LookupError):
    """No plugin of the requested kind is registered under the requested name."""


class PluginDisabledError(PluginNotFoundError):
    """The requested plugin is installed but disabled (``EPISODATA_DISABLED_PLUGINS``)."""


class PluginConflictError(PluginError):
    """Two distributions register a plugin of the same kind under the same name."""


class FormatError(EpisodataError, ValueError):
    """A source file or archive does not have the layout its format requires."""


class MissingFilterError(FormatError):
    """An HDF5 dataset needs a compression filter that is not installed (e.g. Blosc)."""


class PartialFileError(FormatError):
    """A source file ends early or holds an incomplete episode where none is allowed."""


class IntegrityError(EpisodataError, ValueError):
    """Stored bytes do not match their recorded checksum."""


class StorageError(EpisodataError, OSError):
    """A storage location cannot be reached or used (bucket, credentials, endpoint, scheme)."""


class NonFiniteError(EpisodataError, ValueError):
    """A field that must be finite holds NaN or infinity."""


class EpisodataWarning(UserWarning):
    """Base class of every warning episodata emits."""


class EpisodataPluginWarning(EpisodataWarning):
    """A plugin is broken or incompatible and was skipped."""


class EpisodataImportWarning(EpisodataWarning):
    """Something in an imported source is odd but importable; see the import report."""


class EpisodataDeprecationWarning(EpisodataWarning, FutureWarning):
    """A public name or behaviour will change; shown to end users by default."""
