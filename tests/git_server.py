"""A git smart-HTTP server on loopback for repository tests and benches: dulwich's WSGI git
application behind token auth, in a thread.

    server = GitServer(root, port=8810).start()
    server.add_repository("app", branches={...})   # bare repositories made with the git CLI
    server.url("app")                              # http://127.0.0.1:8810/app.git

Auth is HTTP Basic as GitHub takes a token (`x-access-token:<token>`; any user name works):
no or a wrong token → 401 with a challenge, a token in `server.denied` → 403, a repository the
server does not hold → 404 (after auth, as GitHub answers for a repository the token cannot
see). `server.seen` records each request's path and token (None without one), so tests can check
which token a clone used. `/moved/<name>.git/...` answers 302 to the repository: git must not
follow it.
"""

import base64
import subprocess
import threading
import time
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from dulwich.errors import NotGitRepository
from dulwich.repo import Repo
from dulwich.server import Backend
from dulwich.web import make_wsgi_chain

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "HOME": "/nonexistent",
    "PATH": "/usr/bin:/bin",
}


class _FreshBackend(Backend):
    """Each request opens its repository anew. One dulwich Repo shared by concurrent requests
    reads its packs through one file handle (seek, then read), so two clones of a repository at
    once could send each other's bytes: a client's failure the worker was not to blame for."""

    def __init__(self):
        self.paths: dict[str, Path] = {}

    def open_repository(self, path: str | bytes) -> Repo:
        name = path.decode() if isinstance(path, bytes) else path
        if name not in self.paths:
            raise NotGitRepository(path)
        return Repo(str(self.paths[name]))


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


class GitServer:
    def __init__(self, root: Path, *, port: int, tokens: set[str], denied: set[str] = frozenset()):
        self.root, self.port = Path(root), port
        self.tokens, self.denied = set(tokens), set(denied)
        self.repos: dict[str, Repo] = {}
        self.seen: list[tuple[str, str | None]] = []
        self._backend = _FreshBackend()
        self._app = make_wsgi_chain(self._backend)
        self._server = None
        self.delay = 0.0  # seconds each upload-pack request waits (a slow host)
        self.in_flight = self.peak_in_flight = 0
        self._lock = threading.Lock()

    def url(self, name: str, *, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/{name}.git"

    def add_repository(self, name: str, *, commits: dict[str, list[dict[str, bytes]]]) -> dict[str, list[str]]:
        """Bare repository `name` whose branches each get the commits listed (each a {path:
        content} of files written before committing), the first branch the default. Returns
        the commit ids per branch, oldest first."""
        work = self.root / f"{name}-work"
        work.mkdir(parents=True)
        branches = list(commits)
        git("init", "--quiet", "--initial-branch", branches[0], str(work), cwd=self.root)
        shas: dict[str, list[str]] = {}
        for index, branch in enumerate(branches):
            if index:
                git("checkout", "--quiet", "-b", branch, branches[0], cwd=work)
            for number, files in enumerate(commits[branch]):
                for path, content in files.items():
                    target = work / path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(content)
                    if path.endswith(".sh"):
                        target.chmod(0o755)
                git("add", "--all", cwd=work)
                git("commit", "--quiet", "-m", f"{branch} {number}", cwd=work)
                shas.setdefault(branch, []).append(git("rev-parse", "HEAD", cwd=work).strip())
        git("checkout", "--quiet", branches[0], cwd=work)
        bare = self.root / f"{name}.git"
        git("clone", "--quiet", "--bare", str(work), str(bare), cwd=self.root)
        self.repos[name] = Repo(str(bare))
        self._backend.paths[f"/{name}.git"] = bare
        return shas

    def _token(self, environ) -> str | None:
        header = environ.get("HTTP_AUTHORIZATION", "")
        if not header.startswith("Basic "):
            return None
        try:
            _, _, token = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        return token

    def _wsgi(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        token = self._token(environ)
        self.seen.append((path, token))
        if token in self.denied:
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"this token has no access to the repository\n"]
        if token not in self.tokens:
            start_response(
                "401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"'), ("Content-Type", "text/plain")]
            )
            return [b"authentication required\n"]
        if path.startswith("/moved/"):
            query = environ.get("QUERY_STRING")
            start_response("302 Found", [("Location", path[len("/moved") :] + (f"?{query}" if query else ""))])
            return [b""]
        name = path.lstrip("/").split("/", 1)[0]
        if not name.endswith(".git") or name[:-4] not in self.repos:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"repository not found\n"]
        if not path.endswith("/git-upload-pack"):
            return self._app(environ, start_response)
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            return list(self._app(environ, start_response))
        finally:
            with self._lock:
                self.in_flight -= 1

    def start(self) -> "GitServer":
        self._server = make_server(
            "127.0.0.1", self.port, self._wsgi, server_class=_ThreadingServer, handler_class=_Quiet
        )
        threading.Thread(target=self._server.serve_forever, daemon=True, name="git-server").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
