"""Processes the driver under test left behind, found without cgroups and ended (for `host`).

The kit starts the driver's process as the leader of a session of its own, with a mark in its
environment (`MARK`=a token of that host), and that process makes itself the subreaper of what it
starts (`become_subreaper`: a daemon that double-forks stays its descendant). A process of the
driver's is then any live process that is a descendant of it (by parent pid), that is in its session
or process group (a `sleep` it started, a fork), or that carries the mark (one that called setsid and
was orphaned keeps its environment). Found after the driver's process ended too: its session and mark
outlive it. The kit's own process is never made a subreaper (it may be an app's or a test runner's,
whose orphans would then pile up as its zombies).
"""
from __future__ import annotations

import os
import signal
import time

__all__ = ["MARK", "become_subreaper", "children", "cmdline", "descendants", "end", "find", "start_time"]

#: The environment variable the kit marks the driver's process (and so what it starts) with.
MARK = "NNAPI_VTS_HOST"


def _stat(pid: int) -> tuple[str, int, int, int, int] | None:
    """(state, parent pid, process group, session, start time in clock ticks) of `pid`, None when gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _live(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (its threads' children; zombies left out)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                found.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return [c for c in dict.fromkeys(found) if _live(c)]


def descendants(pid: int) -> list[int]:
    """The live descendants of `pid`, by parent pid."""
    out: list[int] = []
    todo = children(pid)
    while todo:
        c = todo.pop()
        if c not in out:
            out.append(c)
            todo.extend(children(c))
    return out


def cmdline(pid: int) -> str:
    """The command line of `pid`, cut at 80 characters ("?" when gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
    return text[:80] or "?"


def _marked(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in b"\0" + f.read()
    except OSError:
        return False


def find(root: int, token: str, since: int = 0, scan: bool = True) -> list[int]:
    """The live processes of the driver whose process is `root` (alive or not), `root` itself left out:
    see the module doc. `since`: the start time (clock ticks) of the first of its processes, so older
    processes are not read; `scan=False`: only its descendants, not the scan of every process for the
    session and the mark (~10 ms)."""
    me = os.getpid()
    needle = f"\0{MARK}={token}\0".encode()
    found = set(descendants(root)) if _live(root) else set()
    pids: list[int] = []
    if scan:
        try:
            pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            pass
    for pid in pids:
        if pid in (root, me) or pid in found:
            continue
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X") or stat[4] < since:
            continue
        if root in (stat[2], stat[3]) or _marked(pid, needle):
            found.add(pid)
    for pid in list(found):
        found.update(descendants(pid))
    found.discard(root)
    found.discard(me)
    return sorted(found)


def start_time(pid: int) -> int:
    """The start time of `pid` in clock ticks since boot (0 when unknown)."""
    stat = _stat(pid)
    return stat[4] if stat is not None else 0


def end(pids: list[int], wait_s: float = 2.0) -> None:
    """SIGKILL `pids`, reap those that are this process's children and wait for the others to be dead
    (bounded: `wait_s` in all): a killed process takes a while to go on a loaded machine."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    for pid in pids:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = not _live(pid)  # not ours (its parent or init reaps it): dead once a zombie or gone
            except OSError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.01)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux; the driver's process calls it,
    so a process the driver detached from its tree stays in it). True when it worked."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0   # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False
