"""The program every tool call's command runs under in a docker sandbox (standard library only,
run by the sandbox's ``python3 -S``; ``docker/operations.py`` falls back to a plain ``/bin/sh -c`` in an
image without python3). It makes itself a child subreaper, runs the command with /bin/sh, and
when the shell exits kills every process the command left behind — background jobs, daemons
that called setsid, a fork bomb's orphans: all of them are reparented to it, not to the
sandbox's pid 1, since it is the nearest subreaper. A tool call's processes end with the call
(issue 44, finding 4); nothing of one call keeps running, or holds pids, into the next.
Its exit status is the shell's (128 + N when a signal N killed it)."""

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def descendants(root: int) -> list[int]:
    """Every live (not zombie) process below `root`, from /proc."""
    children: dict[int, list[int]] = {}
    zombies = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
        if fields[0] == b"Z":
            zombies.add(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return [pid for pid in found if pid not in zombies]


def reap() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    shell = os.fork()
    if shell == 0:
        os.execv("/bin/sh", ["/bin/sh", "-c", sys.argv[1]])
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == shell:
            break
    me = os.getpid()
    for _round in range(10000):
        left = descendants(me)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()
    reap()
    code = os.waitstatus_to_exitcode(status)
    sys.stdout.flush()
    os._exit(code if code >= 0 else 128 - code)


main()
