"""What tracejit trusts when it loads compiled code from disk, and the checks that earn it.

A cache entry is code: its object code is linked into the process and runs with the
user's rights. So the disk cache is a trust boundary, and this module is the only code
that opens files under it (``tracejit.runtime.cache`` and the ``tracejit cache`` command go
through it). It trusts:

* **the user running the process** (the effective uid) and the superuser, nobody else;
* **a root** owned by that user and writable by nobody else (created 0700), not reached
  through a symlink owned by another user, with no ancestor that anyone may rename it out
  of (world-writable without the sticky bit). A root failing a check is refused with one
  warning and caching stays in memory: a directory others could write to may already
  hold their files, so tightening its mode afterwards would prove nothing;
* **a file** only if it is a regular file that user owns and nobody else can write,
  opened without following a symlink and without blocking (a FIFO planted as an entry
  cannot hang the program), read up to its size and never past ``MAX_FILE_BYTES``;
* **an entry** only if its HMAC-SHA256 under the root's secret key (32 random bytes,
  created 0600 in the root on first use) matches its bytes *and its name*, the entry's
  key: an entry copied to another key, from another cache or machine, or forged by
  anyone who cannot read the secret is rejected, and the caller rebuilds it. A cache the
  user copied on purpose is re-signed with ``tracejit cache resign --yes``.

Writes are atomic: a temp file, locked while its writer lives, renamed into place (files
0600), so readers never see half an entry; a temp file nobody holds is an orphan of a
killed writer, removed by ``tracejit cache verify`` and ``prune``. A signed entry is
still only data: nothing read from disk is ``exec``'d (``tracejit.runtime.serialize`` rebuilds
guard and wrapper code from validated fields).

>>> import tempfile
>>> root = TrustedRoot.open(tempfile.mkdtemp() + "/cache", create=True)
>>> entry = root.path("v1", "ab", "abc.tjc")
>>> root.write_signed(entry, "abc", b"object code and metadata")
>>> root.read_signed(entry, "abc")
b'object code and metadata'
>>> try:  # the same bytes under another key
...     root.read_signed(entry, "abd")
... except Rejected as error:
...     print("rejected:", str(error).split(": ", 1)[1])
rejected: its signature does not match (copied from another key or cache, or forged)
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import stat
import tempfile
import threading
import time

MAX_FILE_BYTES = 1 << 30  # no entry is this large: a bigger "entry" is not one of ours
SECRET_NAME = "signing.key"
SECRET_BYTES = 32
TAG_BYTES = 32
TEMP_PREFIX = ".tmp-"
ORPHAN_AGE_SECONDS = 2.0  # a writer locks its temp file within microseconds of creating it
_SIGNED_DOMAIN = b"tracejit cache entry v2\0"


class Refused(Exception):
    """The cache root cannot be trusted; the message says why and what to do."""


class Rejected(Exception):
    """One file cannot be trusted (not regular, foreign, too large, bad signature...)."""


def user_id():
    """Whose cache this is: the effective uid (tests substitute another)."""
    return os.geteuid()


def _trusted_owner(uid):
    return uid in (user_id(), 0)


# --- the root ----------------------------------------------------------------------------
def check_root(directory):
    """Why ``directory`` cannot be a cache root, or ``None`` if it can (it must exist)."""
    try:
        return _root_problem(os.path.abspath(directory))
    except OSError as error:
        return f"cannot inspect it: {error.strerror} ({error.filename})"


def _root_problem(path):
    parts = path.split(os.sep)[1:]
    prefix = os.sep
    for part in parts:
        prefix = os.path.join(prefix, part)
        try:
            info = os.lstat(prefix)
        except OSError as error:
            return f"cannot inspect {prefix}: {error.strerror}"
        if stat.S_ISLNK(info.st_mode) and not _trusted_owner(info.st_uid):
            return (f"it is reached through {prefix}, a symlink owned by another user "
                    f"(uid {info.st_uid})")
    resolved = os.path.realpath(path)
    ancestor = os.path.dirname(resolved)
    while True:
        info = os.stat(ancestor)
        if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
            return (f"its parent {ancestor} is writable by every user without the sticky "
                    "bit, so anyone could replace it")
        if ancestor == os.path.dirname(ancestor):
            break
        ancestor = os.path.dirname(ancestor)
    info = os.stat(resolved)
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid != user_id():
        return f"it is owned by another user (uid {info.st_uid}, you are {user_id()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"other users can write to it (mode {stat.S_IMODE(info.st_mode):o}); files "
                "they put there could run as your code")
    return None


class TrustedRoot:
    """A cache root that passed ``check_root``, with its secret key; every read and write
    of a cache file goes through one of these."""

    _opened = {}  # realpath -> TrustedRoot: the checks run once per process
    _lock = threading.Lock()

    def __init__(self, directory, secret):
        self.directory = directory
        self._secret = secret

    @classmethod
    def open(cls, directory, create=False):
        """The trusted root at ``directory``, creating it (0700) and its key when
        ``create``; ``None`` when it does not exist and ``create`` is false. Raises
        ``Refused`` when the directory is there but cannot be trusted."""
        directory = os.path.abspath(directory)
        with cls._lock:
            known = cls._opened.get(directory)
            if known is not None:
                return known
            if create:
                _make_private_directory(directory)
            elif not os.path.lexists(directory):
                return None
            problem = check_root(directory)
            if problem:
                raise Refused(f"refusing the compile cache at {directory}: {problem}")
            real = os.path.realpath(directory)
            mode = stat.S_IMODE(os.stat(real).st_mode)
            if mode & 0o077:  # readable by others, not writable: tighten, as created
                os.chmod(real, 0o700)
            root = cls(directory, _secret(real, create))
            if root._secret is not None:
                cls._opened[directory] = root
            return root

    @classmethod
    def forget(cls):
        """Drop what this process concluded about roots (tests change them under it)."""
        with cls._lock:
            cls._opened.clear()

    def path(self, *parts):
        return os.path.join(self.directory, *parts)

    @property
    def can_sign(self):
        return self._secret is not None

    # --- signatures ----------------------------------------------------------------------
    def tag(self, name, content):
        """HMAC-SHA256 of ``content`` bound to ``name`` (an entry's key): the same bytes
        under another name do not verify."""
        if self._secret is None:
            raise Rejected("the cache has no signing key yet")
        message = hmac.new(self._secret, _SIGNED_DOMAIN, hashlib.sha256)
        message.update(name.encode() + b"\0")
        message.update(content)
        return message.digest()

    def verifies(self, name, content, tag):
        """Whether ``tag`` is this root's signature of ``content`` under ``name`` (an entry
        shipped from another process verifies only if that process signs with this key)."""
        return hmac.compare_digest(self.tag(name, content), tag)

    def write_signed(self, path, name, content):
        self.write(path, content + self.tag(name, content))

    def read_signed(self, path, name):
        """The content of a signed file, checked; ``Rejected`` when it does not verify."""
        data = self.read(path)
        content, tag = split_signed(path, data)
        if not hmac.compare_digest(self.tag(name, content), tag):
            raise Rejected(f"{path}: its signature does not match (copied from another key "
                           "or cache, or forged)")
        return content

    # --- files ---------------------------------------------------------------------------
    def read(self, path, limit=MAX_FILE_BYTES):
        """The bytes of a regular file this user owns; never follows a symlink, never
        blocks, never reads past ``limit``. ``FileNotFoundError`` when it is absent."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            handle = os.open(path, flags)
        except OSError as error:
            if error.errno == errno.ENOENT:
                raise
            if error.errno == errno.ELOOP:
                raise Rejected(f"{path} is a symlink") from None
            raise Rejected(f"{path}: {error.strerror}") from None
        try:
            info = os.fstat(handle)
            _check_file(path, info)
            if info.st_size > limit:
                raise Rejected(f"{path} is {info.st_size} bytes, more than such a file may be "
                               f"({limit})")
            chunks, remaining = [], info.st_size
            while remaining > 0:
                chunk = os.read(handle, min(remaining, 1 << 24))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(handle)

    def write(self, path, data):
        """Write ``data`` to ``path`` atomically, 0600: a locked temp file beside it,
        flushed, renamed into place. Not fsync'd (3-15 ms on the first call of every
        function): a crash may leave an entry empty or torn, which its signature rejects
        and the next miss rebuilds, and a stats file unreadable, which counts as none."""
        folder = os.path.dirname(path)
        self.make_directories(folder)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX)  # 0600, O_EXCL
        try:
            with os.fdopen(handle, "wb") as stream:
                _lock_file(stream.fileno(), blocking=True)  # alive: not an orphan
                stream.write(data)
                stream.flush()
                os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def make_directories(self, folder):
        """Create ``folder`` and its parents inside the root, each 0700."""
        if os.path.isdir(folder):
            return
        relative = os.path.relpath(folder, self.directory)
        if relative.startswith(os.pardir):
            raise Rejected(f"{folder} is outside the cache root {self.directory}")
        current = self.directory
        for part in relative.split(os.sep):
            current = os.path.join(current, part)
            with contextlib.suppress(FileExistsError):
                os.mkdir(current, 0o700)

    @contextlib.contextmanager
    def locked(self, path):
        """Hold an exclusive lock on ``path`` (a 0600 lock file, created if needed)."""
        self.make_directories(os.path.dirname(path))
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(
            os, "O_CLOEXEC", 0)
        try:
            handle = os.open(path, flags, 0o600)
        except OSError as error:
            raise Rejected(f"{path}: {error.strerror}") from None
        try:
            _check_file(path, os.fstat(handle))
            _lock_file(handle, blocking=True)
            yield
        finally:
            os.close(handle)  # closing releases the lock

    def remove(self, path):
        """Remove a file of the cache (the name, never what a symlink points at)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def files(self, folder, suffix):
        """Regular files named ``*suffix`` in ``folder`` (sorted; symlinks and the rest
        are listed too, so ``verify`` can name them, but nothing here opens them)."""
        try:
            names = sorted(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [os.path.join(folder, name) for name in names
                if name.endswith(suffix) and not name.startswith(TEMP_PREFIX)]

    def describe(self, path):
        """``(bytes, last used)`` of a cache file, without following a symlink."""
        info = os.lstat(path)
        return info.st_size, info.st_mtime

    def touch(self, path):
        """Mark an entry recently used (``prune`` keeps it)."""
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)

    def orphans(self, folders):
        """Temp files in ``folders`` whose writer is gone (nobody holds their lock)."""
        found = []
        now = time.time()
        for folder in folders:
            try:
                names = os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                path = os.path.join(folder, name)
                if name.startswith(TEMP_PREFIX) and _is_orphan(path, now):
                    found.append(path)
        return sorted(found)


def split_signed(path, data):
    """``(content, tag)`` of a signed file's bytes."""
    if len(data) < TAG_BYTES:
        raise Rejected(f"{path} is too short to be signed")
    return data[:-TAG_BYTES], data[-TAG_BYTES:]


def _check_file(path, info):
    if not stat.S_ISREG(info.st_mode):
        raise Rejected(f"{path} is not a regular file")
    if info.st_uid != user_id():
        raise Rejected(f"{path} is owned by another user (uid {info.st_uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Rejected(f"{path} is writable by other users")


def _make_private_directory(directory):
    """Create ``directory`` 0700 (parents too: those the user did not have yet)."""
    parent = os.path.dirname(directory)
    if parent and not os.path.exists(parent):
        _make_private_directory(parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)


def _secret(real_root, create):
    """The root's signing key: read it (it must be the user's, 0600, 32 bytes), or make
    it when ``create`` (two processes racing agree on one: link() never replaces)."""
    path = os.path.join(real_root, SECRET_NAME)
    reader = TrustedRoot(real_root, None)
    for _ in range(2):
        try:
            secret = reader.read(path, limit=SECRET_BYTES)
        except FileNotFoundError:
            if not create:
                return None
            _create_secret(path)
            continue
        except Rejected as error:
            raise Refused(f"refusing the compile cache at {real_root}: its signing key "
                          f"cannot be trusted ({error}); remove {path} to start afresh") from None
        mode = stat.S_IMODE(os.stat(path, follow_symlinks=False).st_mode)
        if mode & 0o077 or len(secret) != SECRET_BYTES:
            raise Refused(f"refusing the compile cache at {real_root}: its signing key "
                          f"{path} is readable by others or damaged (mode {mode:o}, "
                          f"{len(secret)} bytes); remove it to start afresh")
        return secret
    return None


def _create_secret(path):
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=TEMP_PREFIX)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(os.urandom(SECRET_BYTES))
            stream.flush()
            os.fsync(stream.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.link(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _lock_file(handle, blocking):
    try:
        import fcntl
    except ImportError:  # not POSIX: orphans are told apart by age alone
        return True
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _is_orphan(path, now):
    """A temp file is an orphan when no live writer holds its lock (and it is not brand
    new: a writer locks it right after creating it)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        info = os.lstat(path)
        if now - info.st_mtime < ORPHAN_AGE_SECONDS:
            return False
        if not stat.S_ISREG(info.st_mode):
            return True  # not ours to read: remove it by name
        handle = os.open(path, flags)
    except OSError:
        return False
    try:
        return _lock_file(handle, blocking=False)
    finally:
        os.close(handle)
