"""Fair shares for short work between apps (Q5): a slot lent to an app that is behind, and holds.

An app with nothing running, waiting while another app is ahead of it by more than `lag_ns` of
running time, starts at once on a slot lent by that app's work (`lend`), which pauses at its next
checkpoint. Its work is *owed*: while it runs, and for `grace_ns` after (`begin_grace`), the apps
ahead of it are *held* (granted nothing, their running work pauses), so its answer goes out before
the apps contend again for the CPUs and the interpreter lock. A thread of its own (`_loop`) ends the
grace and every `lag_ns` grants again what is no longer held, so a hold never outlasts the fair share
it makes up for. Long work of apps that all keep running takes turns by the scheduler's quantum
instead. One `Holds` belongs to one `Scheduler`; every method but the thread runs under its lock.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .ticket import AppQueue, Ticket


class Holds:
    """The cross-app lending and holds of one scheduler (see the module doc).

    lock: the scheduler's lock; running: its running tickets (the list it keeps); lag_ns: how far ahead
    another app must be (0: all of this is off); grace_ns: how long a hold outlasts the owed work;
    regrant: the scheduler's grant-and-flag pass, which the thread runs while apps are held.
    """

    def __init__(self, lock: threading.Lock, running: "list[Ticket]", lag_ns: int, grace_ns: int, name: str,
                 regrant: Callable[[], None]) -> None:
        self.lag_ns = lag_ns
        self.grace_ns = grace_ns
        self._running = running
        self._name = name
        self._regrant = regrant
        self._changed = threading.Condition(lock)
        self._thread: threading.Thread | None = None
        self._grace_app: "AppQueue | None" = None
        self._grace_until = 0

    def active(self) -> bool:
        """Whether work of an app that is behind runs (or has just run: `grace_ns`)."""
        return self._grace_app is not None or any(t.owed for t in self._running)

    def held(self, app: "AppQueue", now: int) -> bool:
        """Whether `app` pauses (and is granted nothing) for an app it is ahead of by more than the lag:
        while that app's work runs, and for `grace_ns` after (as an app's own priorities pause its
        lower-priority work, Q1)."""
        ahead = app.vtime_at(now) - self.lag_ns
        grace_app = self._grace_app
        if grace_app is not None and grace_app is not app and grace_app.vtime_at(now) < ahead:
            return True
        return any(t.owed and t.app is not app and t.app.vtime_at(now) < ahead for t in self._running)

    def owed(self, app: "AppQueue", now: int) -> bool:
        """Whether work of `app` granted now is behind the apps running (they pause for it); if so the
        thread that ends holds is woken."""
        if not self.lag_ns:
            return False
        limit = app.vtime + self.lag_ns
        owed = any(t.app is not app and t.app.vtime_at(now) > limit for t in self._running)
        if owed:
            self._watch()
        return owed

    def lend(self, apps: "list[AppQueue]", now: int, eligible: "Callable[[AppQueue], Ticket | None]",
             start: "Callable[[AppQueue, Ticket], None]") -> None:
        """Lend a slot to each app with nothing running whose eligible work waits while another app is
        ahead by more than the lag: the furthest-ahead app's work yields at its next checkpoint."""
        if not self.lag_ns:
            return
        for app in apps:
            top = None if app.running else eligible(app)
            if top is None:
                continue
            limit = app.vtime + self.lag_ns
            victims = [t for t in self._running if t.app is not app and not t.lent and t.app.vtime_at(now) > limit]
            if not victims:
                continue
            victim = max(victims, key=lambda t: (t.app.vtime_at(now), -t.rank, t.seq))
            victim.lent = True
            top.handoff = top.borrowed = victim
            start(app, top)  # (which finds it owed)

    def begin_grace(self, app: "AppQueue") -> None:
        """`app`'s owed work ended: hold the apps it paused `grace_ns` longer."""
        if not self.grace_ns:
            return
        self._grace_app, self._grace_until = app, time.monotonic_ns() + self.grace_ns
        self._watch()

    def _watch(self) -> None:
        """Wake the thread that ends holds (started the first time)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, daemon=True, name=f"qos-{self._name}")
            self._thread.start()
        self._changed.notify()

    def _loop(self) -> None:
        """While apps are held: end the grace when it is over, and every `lag_ns` grant again."""
        with self._changed:
            while True:
                if not self.active():
                    self._changed.wait()
                    continue
                wait = self.lag_ns
                if self._grace_app is not None:
                    left = self._grace_until - time.monotonic_ns()
                    if left <= 0:
                        self._grace_app = None
                    else:
                        wait = min(wait, left)
                self._regrant()
                self._changed.wait(wait / 1e9)
