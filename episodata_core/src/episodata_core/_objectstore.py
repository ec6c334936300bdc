"""Object storage through TensorStore's key-value stores: our metadata objects and the lease.

:class:`ObjectKeyValue` is :class:`~episodata_core.location.KeyValue` on ``s3://``,
``gs://`` and ``http(s)://`` locations. Every failure becomes one
:class:`~episodata_core.errors.StorageError` that names the URL and what to do: a
missing bucket, refused credentials, an endpoint that cannot be reached after the
bounded retries of :class:`~episodata_core.location.StorageOptions`.

:class:`Lease` keeps one writer per dataset where no ``flock`` exists: an object
``.episodata-lease.json`` (holder, host, pid, created, expiry), taken and renewed by
conditional writes (the store's generation of the object must be the one we read), and
renewed by a thread at a third of its lifetime. A writer that dies stops renewing; the
next writer takes the lease once it has expired.

TensorStore is imported inside functions only: ``import episodata`` stays light.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Self

from episodata_core.errors import DatasetStateError, StorageError
from episodata_core.location import CREATING_NAME, LEASE_NAME, LOCK_NAME, MANIFEST_NAME

if TYPE_CHECKING:
    from types import TracebackType

    from episodata_core.location import Location

__all__ = [
    "Lease",
    "ObjectKeyValue",
    "check_lease",
    "clear",
    "creation_state",
    "storage_error",
]

_HELD: dict[str, Lease] = {}
"""This process's live leases by URL, so that a backend can check before it writes."""
_MARGIN = 0.2
"""A writer stops writing data once less than this fraction of its lease is left."""


def check_lease(url: str) -> None:
    """Raise :class:`DatasetStateError` if this process's lease on ``url`` is lost or ending.

    Object stores have no fencing: a writer whose lease expired while it was paused could
    overwrite the chunks of the writer that took over. Every fold checks first, so only a
    writer that still holds its lease, with a margin, writes data.
    """
    lease = _HELD.get(url)
    if lease is not None:
        lease.check()


# what TensorStore raises for a failed request (a status code maps to one of these)
_FAILURES = (ValueError, RuntimeError, OSError, TimeoutError)
_ABSENT = b"\x02"  # TensorStore's generation of a missing key (StorageGeneration::NoValue)


def storage_error(location: Location, what: str, error: BaseException) -> StorageError:
    """One clear :class:`StorageError` for a failed request to ``location``."""
    text = str(error)
    lowered = text.lower()
    url = location.url
    where = location.endpoint or "the default endpoint" if location.scheme == "s3" else url
    if "nosuchbucket" in lowered or "bucket does not exist" in lowered:
        return StorageError(
            f"cannot {what} {url!r}: the bucket {location.bucket!r} does not exist at {where}; "
            "create it first, or check the bucket name and the endpoint storage option"
        )
    if any(
        word in lowered
        for word in ("accessdenied", "invalidaccesskeyid", "signaturedoesnotmatch", "403")
    ):
        return StorageError(
            f"cannot {what} {url!r}: access denied by {where} (wrong or missing credentials); "
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the profile "
            "storage option, or anonymous=true for public data"
        )
    unreachable = ("could not connect", "couldn't connect", "failed to connect", "resolve host")
    if any(word in lowered for word in unreachable):
        tries = location.options.retries
        return StorageError(
            f"cannot {what} {url!r}: {where} cannot be reached (gave up after {tries} "
            "retries); check the endpoint storage option (or AWS_ENDPOINT_URL) and that the "
            "server runs"
        )
    first = text.splitlines()[0] if text else type(error).__name__
    return StorageError(f"cannot {what} {url!r}: {where} answered: {first}")


class ObjectKeyValue:
    """:class:`~episodata_core.location.KeyValue` on an object-storage location."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self._store: Any = None

    @property
    def store(self) -> Any:
        """The TensorStore ``KvStore`` of the location's prefix (opened at first use)."""
        if self._store is None:
            import tensorstore as ts

            context = ts.Context(self.location.context_spec())
            spec = self.location.kvstore_spec()
            try:
                self._store = ts.KvStore.open(spec, context=context).result()
            except _FAILURES as err:
                raise storage_error(self.location, "open", err) from None
        return self._store

    def _wait(self, future: Any, what: str) -> Any:
        try:
            return future.result()
        except _FAILURES as err:
            raise storage_error(self.location, what, err) from None

    def get(self, key: str) -> bytes | None:
        return self.stamped(key)[0]

    def stamped(self, key: str) -> tuple[bytes | None, bytes]:
        read = self._wait(self.store.read(key), f"read {key} of")
        if read.state == "missing":
            return None, _ABSENT
        return bytes(read.value), bytes(read.stamp.generation)

    def put(self, key: str, value: bytes, *, durable: bool = True) -> None:
        # one PUT: the object is replaced whole, so readers see the old or the new one
        self.location.check_writable()
        self._wait(self.store.write(key, value), f"write {key} to")

    def put_if(self, key: str, value: bytes, token: bytes | None) -> bool:
        return self.put_stamped(key, value, token) is not None

    def put_stamped(self, key: str, value: bytes | None, token: bytes | None) -> bytes | None:
        """A conditional write (``None`` deletes); the new token, or ``None`` when refused."""
        self.location.check_writable()
        condition = _ABSENT if token is None else token
        stamp = self._wait(self.store.write(key, value, if_equal=condition), f"write {key} to")
        generation = bytes(stamp.generation)
        return generation if generation else None

    def list(self, prefix: str = "") -> list[str]:
        import tensorstore as ts

        if prefix:
            found = self.store.list(ts.KvStore.KeyRange(prefix, prefix + "\xff"))
        else:
            found = self.store.list()
        keys = self._wait(found, "list")
        return sorted(key.decode() for key in keys)

    def delete(self, key: str) -> None:
        self.location.check_writable()
        self._wait(self.store.write(key, None), f"delete {key} from")


def creation_state(location: Location) -> str:
    """:func:`~episodata_core.location.creation_state` of a prefix on object storage."""
    names = set(ObjectKeyValue(location).list()) - {LEASE_NAME}
    if MANIFEST_NAME in names:
        return "dataset"
    if not names:
        return "absent"  # object storage has no empty folders
    if CREATING_NAME in names:
        return "unfinished"
    return "foreign"


def clear(location: Location) -> None:
    """Delete every object under the prefix but the lease (the caller holds it)."""
    store = ObjectKeyValue(location)
    for key in store.list():
        if key not in (LEASE_NAME, LOCK_NAME):
            store.delete(key)


class Lease:
    """The writer lease of a dataset on object storage (same interface as ``WriterLock``)."""

    RENEW_FRACTION = 1 / 3

    def __init__(self, location: Location) -> None:
        self.location = location
        self.seconds = location.options.lease_seconds
        self._store = ObjectKeyValue(location)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._token: bytes | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False
        self._expiry = 0.0

    @property
    def held(self) -> bool:
        """Whether this object holds the lease."""
        return self._token is not None

    def _document(self, created: float) -> bytes:
        now = time.time()
        return json.dumps(
            {
                "holder": self.holder,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "created": created,
                "renewed": now,
                "expiry": now + self.seconds,
            }
        ).encode()

    def acquire(self) -> None:
        """Take the lease, or raise :class:`DatasetStateError` naming its live holder."""
        if self._token is not None:
            return
        value, token = self._store.stamped(LEASE_NAME)
        url = self.location.url
        if value is not None:
            try:
                other = json.loads(value)
                expiry, created = float(other["expiry"]), float(other["created"])
                holder = f"{other['holder']} (host {other['host']}, pid {other['pid']})"
            except (ValueError, KeyError, TypeError):
                expiry, created, holder = 0.0, 0.0, "unknown"  # unreadable: never trusted
            now = time.time()
            if expiry > now:
                raise DatasetStateError(
                    f"{url!r} is being written by {holder}, whose lease was taken "
                    f"{now - created:.0f} s ago and expires in {expiry - now:.0f} s; one writer "
                    "at a time. Open it with read_only=True to read, or, if that writer died, "
                    "wait for its lease to expire"
                )
        self._created = time.time()
        written = self._store.put_stamped(LEASE_NAME, self._document(self._created), token)
        if written is None:
            raise DatasetStateError(
                f"{url!r}: another writer took the lease at the same moment; one writer at a "
                "time. Open it with read_only=True to read"
            )
        self._token = written
        self._expiry = time.time() + self.seconds
        _HELD[self.location.url] = self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._renew_loop, name="episodata-lease", daemon=True
        )
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.seconds * self.RENEW_FRACTION):
            try:
                self.renew()
            except StorageError:
                continue  # a server that is away: retried at the next round, or expires

    def renew(self) -> None:
        """Extend the lease; marks it lost when another writer has taken it over."""
        with self._lock:
            if self._token is None:
                return
            written = self._store.put_stamped(
                LEASE_NAME, self._document(self._created), self._token
            )
            if written is None:
                self.lost = True
                self._token = None
                self._stop.set()
            else:
                self._token = written
                self._expiry = time.time() + self.seconds

    def check(self) -> None:
        """Raise :class:`DatasetStateError` unless the lease is held, with a margin left."""
        if self._token is not None and time.time() > self._expiry - _MARGIN * self.seconds:
            self.renew()  # the renewal thread fell behind (a busy machine): try now
        if self.lost or self._token is None:
            raise DatasetStateError(
                f"{self.location.url!r}: this writer's lease was lost (it expired and another "
                "writer took it); nothing more is committed. Open the dataset again to write"
            )

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still ours."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if _HELD.get(self.location.url) is self:
            del _HELD[self.location.url]
        with self._lock:
            token, self._token = self._token, None
        if token is not None:
            with contextlib.suppress(StorageError):  # else the lease expires by itself
                self._store.put_stamped(LEASE_NAME, None, token)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
