"""URLs of dataset locations: the parsed :class:`Location`, its options, the :class:`Url` str.

Re-exported by :mod:`episodata_core.location`, which is where callers import them from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from episodata_core.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["SCHEMES", "Location", "Scheme", "StorageOptions", "Url", "parse"]

SCHEMES = ("file", "s3", "gs", "http", "https")
"""URL schemes a location may have; a plain path is a local folder."""

Scheme = Literal["file", "s3", "gs", "http", "https"]


class StorageOptions(BaseModel):
    """How to reach a location on object storage (``storage_options=`` / ``--storage-option``).

    Unset values come from the standard AWS variables and profiles (``AWS_ENDPOINT_URL``,
    ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``). Local folders take none of them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = Field(
        default=None,
        description="S3 endpoint URL (an S3-compatible server); default: AWS_ENDPOINT_URL, AWS.",
    )
    region: str | None = Field(
        default=None, description="Region; default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1."
    )
    anonymous: bool = Field(default=False, description="Send unsigned requests (public data).")
    profile: str | None = Field(
        default=None, description="Profile of ~/.aws/credentials; default: AWS_PROFILE."
    )
    retries: int = Field(
        default=4, ge=0, le=32, description="Retries of a failed request before the error."
    )
    concurrency: int = Field(default=32, ge=1, le=1024, description="Requests in flight at once.")
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Lifetime of the writer lease; renewed at a third of it while writing.",
    )
    cache_dir: str | None = Field(
        default=None, description="Not supported yet: a local read-through chunk cache."
    )

    @classmethod
    def validated(cls, options: Mapping[str, Any] | StorageOptions | None) -> StorageOptions:
        """Validate ``options`` with errors that name the option, expected and actual."""
        if isinstance(options, StorageOptions):
            return options
        try:
            parsed = cls.model_validate(dict(options or {}))
        except ValidationError as err:
            problems = "; ".join(
                f"storage option {'.'.join(str(p) for p in e['loc'])!r}: {e['msg']}"
                + ("" if e["type"] == "extra_forbidden" else f" (got {e.get('input')!r})")
                for e in err.errors()
            )
            known = ", ".join(cls.model_fields)
            raise StorageError(f"{problems}; the storage options are: {known}") from None
        if parsed.cache_dir is not None:
            raise StorageError(
                "storage option 'cache_dir': a local read-through cache is not supported yet; "
                "leave it out (TensorStore's in-memory cache pool is used)"
            )
        return parsed


@dataclass(frozen=True)
class Location:
    """A parsed location: scheme, bucket (or host) and key prefix, and its options."""

    url: str
    """Canonical: ``s3://bucket/prefix`` without a trailing slash; a path for local ones."""
    scheme: Scheme
    bucket: str
    """The bucket (``s3``, ``gs``), the ``scheme://host[:port]`` (``http(s)``), ``""`` (file)."""
    prefix: str
    """Key prefix inside the bucket, ``""`` or ending in ``/``; the folder for ``file``."""
    options: StorageOptions

    @property
    def remote(self) -> bool:
        """Whether the location is on object storage (not a local folder)."""
        return self.scheme != "file"

    @property
    def writable(self) -> bool:
        """Whether datasets can be written there (``http(s)`` is read-only)."""
        return self.scheme in ("file", "s3", "gs")

    def check_writable(self, what: str = "write") -> None:
        """Raise :class:`StorageError` for read-only locations."""
        if not self.writable:
            raise StorageError(
                f"cannot {what} {self.url!r}: {self.scheme}:// locations are read-only; "
                "write to a local folder, s3:// or gs://, and publish that folder over HTTP"
            )

    def child(self, relative: str) -> str:
        """The key of ``relative`` in this location's key-value store."""
        return f"{self.prefix}{relative}"

    def kvstore_spec(self, relative: str = "") -> dict[str, Any]:
        """TensorStore's kvstore spec of ``relative`` (a folder ends in ``/``) in here."""
        if self.scheme == "file":
            return {"driver": "file", "path": f"{self.url}/{relative}"}
        if self.scheme == "http" or self.scheme == "https":
            return {"driver": "http", "base_url": f"{self.bucket}/{self.prefix}{relative}"}
        if self.scheme == "gs":
            return {"driver": "gcs", "bucket": self.bucket, "path": self.child(relative)}
        spec: dict[str, Any] = {
            "driver": "s3",
            "bucket": self.bucket,
            "path": self.child(relative),
            "aws_region": self.region,
            "aws_credentials": self.credentials_spec(),
        }
        endpoint = self.endpoint
        if endpoint is not None:
            spec["endpoint"] = endpoint
        return spec

    @property
    def endpoint(self) -> str | None:
        """The S3 endpoint: the option, else ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``."""
        return (
            self.options.endpoint
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )

    @property
    def region(self) -> str:
        """The region: the option, else ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``us-east-1``."""
        return (
            self.options.region
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1"
        )

    def credentials_spec(self) -> dict[str, Any]:
        """TensorStore's ``aws_credentials``: anonymous, a profile, the environment or default."""
        if self.options.anonymous:
            return {"type": "anonymous"}
        profile = self.options.profile or os.environ.get("AWS_PROFILE")
        if profile:
            return {"type": "profile", "profile": profile}
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            # explicit: the default chain also looks for ~/.aws files and logs when missing
            return {"type": "environment"}
        return {"type": "default"}

    def context_spec(self) -> dict[str, Any]:
        """TensorStore context resources of this location: bounded retries, concurrency."""
        retries = {"max_retries": max(1, self.options.retries), "initial_delay": "50ms"}
        retries["max_delay"] = "2s"
        if self.scheme == "s3":
            return {
                "s3_request_retries": retries,
                "s3_request_concurrency": {"limit": self.options.concurrency},
            }
        if self.scheme == "gs":
            return {
                "gcs_request_retries": retries,
                "gcs_request_concurrency": {"limit": self.options.concurrency},
            }
        if self.scheme in ("http", "https"):
            return {"http_request_retries": retries}
        return {}


class Url(str):
    """A remote location as the ``str`` that the core and backends pass around.

    It carries its parsed :class:`Location` (with the storage options), so a backend's
    ``open(location, ...)`` reaches the store the caller configured.
    """

    location: Location

    def __new__(cls, location: Location) -> Self:
        """The URL of ``location``, carrying it."""
        made = super().__new__(cls, location.url)
        made.location = location
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its options."""
        # through processes (spawned DataLoader workers) with its options
        return (_url_from, (self.location.url, self.location.options.model_dump()))


def _url_from(url: str, options: dict[str, Any]) -> Url:
    parsed = parse(url, options)
    return Url(parsed)


def parse(
    location: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | StorageOptions | None = None,
) -> Location:
    """Parse a path or URL with its storage options; errors name what is wrong."""
    options = StorageOptions.validated(storage_options)
    text = os.fspath(location)
    if "://" not in text:
        return Location(str(Path(text).expanduser().absolute()), "file", "", "", options)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise StorageError(
            f"location {text!r}: unknown scheme {parts.scheme + '://'!r}; expected a local "
            "path or one of file://, s3://, gs://, http://, https://"
        )
    if parts.query or parts.fragment:
        raise StorageError(f"location {text!r}: a location has no '?query' or '#fragment'")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"location {text!r}: file:// URLs name a local path")
        folder = str(Path(parts.path).absolute())
        return Location(folder, "file", "", "", options)
    if not parts.netloc:
        raise StorageError(f"location {text!r}: no bucket; expected {scheme}://BUCKET/PREFIX")
    keys = [part for part in parts.path.split("/") if part]
    if any(part in (".", "..") for part in keys):
        raise StorageError(f"location {text!r}: '.' and '..' are not allowed in a URL's path")
    prefix = "".join(f"{part}/" for part in keys)
    if scheme in ("http", "https"):
        bucket = f"{scheme}://{parts.netloc}"
        url = f"{bucket}/{prefix}".rstrip("/")
    else:
        bucket = parts.netloc
        url = f"{scheme}://{bucket}/{prefix}".rstrip("/")
    if options.endpoint is not None and not options.endpoint.startswith(("http://", "https://")):
        raise StorageError(
            f"storage option 'endpoint': expected an http:// or https:// URL, got "
            f"{options.endpoint!r}"
        )
    return Location(url, scheme, bucket, prefix, options)  # type: ignore[arg-type]
