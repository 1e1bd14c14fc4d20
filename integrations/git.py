"""The worker's git adapter: clone one repository into a scratch directory with the git CLI,
bounded, and read the working tree back for the sandbox. The only module that runs git.

What a tenant's repository cannot do to the worker:

* reach a private address: the host is resolved and checked once (core/outbound.py), git is
  pinned to the checked address (`http.curloptResolve`) and follows no redirect, so a second DNS
  answer or a 30x to 127.0.0.1 goes nowhere; only http(s) transports are allowed;
* run code: hooks point at /dev/null, no system or global config is read, no credential helper
  or prompt, no submodules; objects are fsck'd on receipt;
* fill the disk or hold the worker: no file git writes may pass `max_bytes` (RLIMIT_FSIZE via
  `prlimit`, everything received kept as one pack), the scratch directory is measured every
  POLL_SECONDS, the tree's blob sizes are checked before the checkout inflates them, and the
  process group is killed past the bound or after `timeout` seconds;
* leak the token: it travels in the environment (GIT_CONFIG_COUNT/KEY/VALUE, readable only by
  the worker's own user, unlike argv), as an `Authorization: Basic` header of
  `x-access-token:<token>` (GitHub's form; GitLab, Gitea and git http-backend behind basic auth
  accept it too), and is never written to disk: `.git/config` names the remote URL only.
"""

import base64
import functools
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

from core import outbound
from processors.repositories import CHECKOUT, CLONE, GitFailure, TreeEntry, classify_git_failure

POLL_SECONDS = 0.1
PRLIMIT = shutil.which("prlimit")  # util-linux
GIT = shutil.which("git")
_PAST_FSIZE = re.compile(
    r"signal 25|file size limit|invalid index-pack output|index-pack died|unpack-objects died", re.I
)
CHUNK = 1024 * 1024
STDERR_TAIL = 64 * 1024


class CloneFailed(Exception):
    def __init__(self, failure: GitFailure):
        super().__init__(failure.message)
        self.failure = failure


@functools.cache
def git_usable() -> bool:
    """git is installed, and new enough for `http.curloptResolve` (2.37): an older git ignores
    the key and would resolve the host again itself, so it is not used at all."""
    if GIT is None:
        return False
    try:
        found = subprocess.run([GIT, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    match = re.search(r"(\d+)\.(\d+)", found)
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (2, 37)


def scratch_root() -> Path:
    """The worker's directory for clones in progress (mode 0700)."""
    root = Path(settings.MANGO_REPOSITORY_SCRATCH_DIR or Path(tempfile.gettempdir()) / "mango-repositories")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def _pinned_target(url: str) -> tuple[str, int, str]:
    try:
        host, port = outbound.url_target(url)
        address = outbound.resolve(host, port)[0]
    except outbound.OutboundRefused as exc:
        message = str(exc)
        if "private address" in message:
            message = (
                "The repository's host resolves to a private address, which this server does not connect to "
                "(the operator can allow it in MANGO_OUTBOUND_PRIVATE_HOSTS)."
            )
        elif "does not resolve" in message:
            message = "The repository's host does not resolve."
        else:
            message = "The repository URL cannot be reached from this server."
        raise CloneFailed(GitFailure(CLONE, message)) from None
    return host, port, f"[{address}]" if ":" in address else address


def _environment(*, home: Path, host: str, port: int, address: str, token: str | None) -> dict[str, str]:
    config = [
        ("core.hooksPath", "/dev/null"),
        ("core.askPass", ""),
        ("credential.helper", ""),
        ("http.followRedirects", "false"),
        ("http.curloptResolve", f"{host}:{port}:{address}"),
        ("protocol.allow", "never"),
        ("protocol.http.allow", "always"),
        ("protocol.https.allow", "always"),
        ("transfer.fsckObjects", "true"),
        ("submodule.recurse", "false"),
        ("advice.detachedHead", "false"),
        ("init.defaultBranch", "main"),
        # Everything received is kept as one pack (one file, which RLIMIT_FSIZE bounds).
        ("fetch.unpackLimit", "1"),
        ("transfer.unpackLimit", "1"),
        ("core.autocrlf", "false"),
    ]
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        config.append(("http.extraHeader", f"Authorization: Basic {basic}"))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ALLOW_PROTOCOL": "http:https",
        "GIT_CONFIG_COUNT": str(len(config)),
    }
    for index, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def _size(path: Path) -> int:
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    total += info.st_size
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(Path(entry.path))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return total


class _Run:
    """The git commands of one clone, sharing its deadline, its byte bound and its environment."""

    def __init__(self, *, work: Path, env: dict, max_bytes: int, deadline: float, should_cancel):
        self.work, self.env, self.max_bytes, self.deadline = work, env, max_bytes, deadline
        self.should_cancel = should_cancel

    def git(self, *args: str, cwd: Path | None = None, stdout: Path | None = None) -> tuple[int, str]:
        stderr_path = self.work / "stderr"
        # No file git writes (the received pack above all) may pass the bound, even between
        # two polls: RLIMIT_FSIZE, inherited by every process git starts (SIGXFSZ past it).
        limit = [PRLIMIT, f"--fsize={self.max_bytes}", "--"] if PRLIMIT else []
        if not git_usable():
            raise CloneFailed(GitFailure(CLONE, "This server's worker has no git (2.37 or later) to clone with."))
        with open(stderr_path, "wb") as stderr, open(stdout or os.devnull, "wb") as out:
            process = subprocess.Popen(
                [*limit, GIT, *args],
                cwd=cwd or self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=stderr,
                start_new_session=True,
            )
            try:
                while True:
                    try:
                        process.wait(POLL_SECONDS)  # back as soon as git is done
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if _size(self.work) > self.max_bytes:
                        self._kill(process)
                        raise self.too_large()
                    if time.monotonic() > self.deadline:
                        self._kill(process)
                        raise CloneFailed(GitFailure(CLONE, "The clone took longer than this server allows."))
                    if self.should_cancel():
                        self._kill(process)
                        raise CloneFailed(GitFailure(CLONE, "The clone was interrupted."))
            except BaseException:
                self._kill(process)
                raise
        with open(stderr_path, "rb") as stderr:
            stderr.seek(max(0, stderr_path.stat().st_size - STDERR_TAIL))
            text = stderr.read().decode("utf-8", "replace")
        stderr_path.unlink()
        if process.returncode != 0 and PRLIMIT and _PAST_FSIZE.search(text):
            # A process git started died writing past RLIMIT_FSIZE (SIGXFSZ, signal 25): git
            # says so, or only that index-pack gave no answer.
            raise self.too_large()
        return process.returncode, text

    def too_large(self) -> "CloneFailed":
        return CloneFailed(
            GitFailure(
                CLONE,
                f"The repository is larger than the {self.max_bytes} bytes this server clones "
                "(MANGO_REPOSITORY_MAX_BYTES).",
            )
        )

    def check_tree_fits(self, tree: Path, revision: str) -> None:
        """Before a checkout: what it would write (the blobs of `revision`) must fit the bound
        beside what is already on disk; a tree of compressed zeros is refused before it is
        inflated."""
        listing = self.work / "ls-tree"
        status, _ = self.git("-C", str(tree), "ls-tree", "-r", "-l", "-z", "--full-tree", revision, stdout=listing)
        if status != 0:
            raise CloneFailed(GitFailure(CHECKOUT, "The repository's tree could not be read."))
        total = 0
        with open(listing, "rb") as entries:
            for entry in _split_nul(entries):
                size = entry.split(b"\t", 1)[0].split()[-1]
                total += int(size) if size.isdigit() else 0
        listing.unlink()
        if _size(self.work) + total > self.max_bytes:
            raise self.too_large()

    @staticmethod
    def _kill(process: subprocess.Popen) -> None:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def clone(
    *,
    url: str,
    token: str | None,
    checkout: dict | None,
    max_bytes: int,
    timeout: float,
    should_cancel: Callable[[], bool] = lambda: False,
) -> Path:
    """Clone `url` at `checkout` into a new scratch directory and return it (holding `tree/`, the
    working tree with its `.git`). The caller removes it with `discard`; on CloneFailed nothing
    is left behind. Shallow where the checkout allows: a branch (or the default branch) at depth
    1; a commit fetched alone at depth 1 when the server serves unadvertised objects, else the
    whole history is fetched and the commit checked out."""
    host, port, address = _pinned_target(url)
    work = Path(tempfile.mkdtemp(prefix="clone-", dir=scratch_root()))
    try:
        home = work / "home"
        home.mkdir()
        env = _environment(home=home, host=host, port=port, address=address, token=token)
        run = _Run(
            work=work, env=env, max_bytes=max_bytes, deadline=time.monotonic() + timeout, should_cancel=should_cancel
        )
        tree = work / "tree"
        if checkout is None or checkout["type"] == "branch":
            branch = ["--branch", checkout["name"]] if checkout else []
            status, stderr = run.git(
                "clone", "--quiet", "--template=", "--no-checkout", "--no-tags", "--depth", "1", *branch, "--", url,
                str(tree),
            )  # fmt: skip
            if status != 0:
                raise CloneFailed(classify_git_failure(stderr, checkout=checkout))
            run.check_tree_fits(tree, "HEAD")
            status, stderr = run.git("-C", str(tree), "reset", "--quiet", "--hard")
            if status != 0:
                raise CloneFailed(GitFailure(CLONE, "The repository's working tree could not be written."))
        else:
            sha = checkout["sha"]
            for args in (
                ("init", "--quiet", "--template=", str(tree)),
                ("-C", str(tree), "remote", "add", "origin", url),
            ):
                status, stderr = run.git(*args)
                if status != 0:
                    raise CloneFailed(GitFailure(CLONE, "The repository could not be cloned."))
            status, stderr = run.git("-C", str(tree), "fetch", "--quiet", "--no-tags", "--depth", "1", "origin", sha)
            if status != 0:
                failure = classify_git_failure(stderr, checkout=checkout)
                if failure.type != CHECKOUT:
                    raise CloneFailed(failure)
                # The server serves advertised tips only: the whole history, then the commit.
                status, stderr = run.git("-C", str(tree), "fetch", "--quiet", "--no-tags", "origin")
                if status != 0:
                    raise CloneFailed(classify_git_failure(stderr, checkout=checkout))
            status, _ = run.git("-C", str(tree), "cat-file", "-e", f"{sha}^{{commit}}")
            if status != 0:
                raise CloneFailed(GitFailure(CHECKOUT, f"The repository has no commit {sha}."))
            run.check_tree_fits(tree, sha)
            status, stderr = run.git("-C", str(tree), "checkout", "--quiet", "--detach", sha)
            if status != 0:
                raise CloneFailed(GitFailure(CHECKOUT, f"The repository has no commit {sha}."))
        return work
    except BaseException:
        discard(work)
        raise


def _split_nul(handle) -> Iterator[bytes]:
    pending = b""
    while chunk := handle.read(CHUNK):
        *entries, pending = (pending + chunk).split(b"\0")
        yield from entries
    if pending:
        yield pending


def discard(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)


def tree_entries(work: Path) -> Iterator[TreeEntry]:
    """The working tree below `work/tree` (its `.git` included), depth first in name order.
    Links are listed as links, never followed; anything but directories, regular files and
    links (git makes none) is left out."""
    root = work / "tree"

    def walk(directory: Path, prefix: str) -> Iterator[TreeEntry]:
        with os.scandir(directory) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            relative = f"{prefix}{entry.name}"
            info = entry.stat(follow_symlinks=False)
            mtime = int(info.st_mtime)
            if stat.S_ISLNK(info.st_mode):
                yield TreeEntry(relative, "symlink", target=os.readlink(entry.path), mtime=mtime)
            elif stat.S_ISDIR(info.st_mode):
                yield TreeEntry(relative, "dir", mtime=mtime)
                yield from walk(Path(entry.path), f"{relative}/")
            elif stat.S_ISREG(info.st_mode):
                yield TreeEntry(
                    relative,
                    "file",
                    mode=info.st_mode & 0o777,
                    size=info.st_size,
                    mtime=mtime,
                    open_chunks=_reader(Path(entry.path)),
                )

    return walk(root, "")


def _reader(path: Path) -> Callable[[], Iterator[bytes]]:
    def chunks() -> Iterator[bytes]:
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                yield chunk

    return chunks
