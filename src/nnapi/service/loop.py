"""The service's event loop: one epoll instance holding every socket, and the threads that wait on it.

The kernel wakes one thread per event, which reads the call and runs it itself on behalf of the
caller (`Service.dispatch`), so a call costs no handoff between threads; a new thread starts only
when no other is left waiting, and an idle one retires while another is left waiting for I/O. The
loop also accepts connections (within the service's and each uid's limits), closes those that do
not say hello in time, and drops a connection that sends a malformed frame.
"""
from __future__ import annotations

import logging
import os
import resource
import select
import socket
import threading
import time
from typing import TYPE_CHECKING

from ..qos import threads
from .budget import HELLO_TIMEOUT, Task
from .discovery import bind
from .objects import Client
from .peer import Credentials, peer_credentials
from .wire import ProtocolError, close_fds, poll_until, poll_window, recv_chunk

if TYPE_CHECKING:
    from .server import Service

log = logging.getLogger("nnapi.service")

_ARMED = select.EPOLLIN | select.EPOLLONESHOT


class _Retire(Exception):
    """An idle service thread leaves."""


def _raise_fd_limit() -> None:
    """Use the hard limit of open descriptors: every connection and kept pool holds some."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


class Loop:
    """The epoll instance of `service`, its threads (at most `max_threads`) and its connections."""

    def __init__(self, service: "Service", max_threads: int) -> None:
        self.service = service
        self.max_threads = max_threads
        self.stopping = threading.Event()
        #: The connections, by socket descriptor.
        self.clients: dict[int, Client] = {}
        self._to_close: list[Client] = []
        self._refusals: dict[int, tuple[float, int]] = {}  # uid -> (when its refusals were last logged, since)
        self._lock = threading.Lock()
        self._threads = 0          # service threads
        self._waiting = 0          # of them, waiting for I/O
        self._polling = False  # a thread polls for the next call (one at a time: each takes a core)
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.epoll = select.epoll()
        self._watched = -1

    # --- lifetime -----------------------------------------------------------------------------------
    def listen(self, path: str) -> None:
        """Bind and listen on `path`."""
        _raise_fd_limit()
        self._listener = bind(path)
        st = os.stat(path)
        self._inode = (st.st_dev, st.st_ino)
        self._listener.setblocking(False)
        self.epoll.register(self._listener.fileno(), _ARMED)
        self.epoll.register(self._wake_r, select.EPOLLIN)  # level-triggered: wakes every thread once set

    def stop(self) -> None:
        """Have every thread leave (safe from signal handlers and other threads)."""
        self.stopping.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def watch(self, pid: int) -> None:
        """Stop when process `pid` exits."""
        self._watched = os.pidfd_open(pid)
        self.epoll.register(self._watched, select.EPOLLIN)

    def request_close(self, client: Client) -> None:
        """Have a thread drop `client` (a connection that cannot take its answers)."""
        with self._lock:
            self._to_close.append(client)
        self.wake()

    def wake(self) -> None:
        """Wake one waiting thread (a queued call, a connection to close)."""
        try:
            os.write(self._wake_w, b"w")
        except OSError:
            pass

    def close(self, path: str) -> None:
        """Drop every connection; stop listening and remove the socket if it is still ours."""
        with self._lock:
            clients = list(self.clients.values())
        for client in clients:
            self.drop(client)
        if self._listener is not None:
            try:
                self.epoll.unregister(self._listener.fileno())
            except (OSError, ValueError):
                pass
            self._listener.close()
            self._listener = None
            try:  # (a restarted service may have replaced it)
                st = os.stat(path)
                if (st.st_dev, st.st_ino) == self._inode:
                    os.unlink(path)
            except OSError:
                pass

    # --- threads ----------------------------------------------------------------------------------------
    # Every service thread waits on the one epoll instance; the kernel wakes one of them per event and
    # EPOLLONESHOT keeps a connection with that thread until it has read it. The thread that reads a
    # call runs it (no handoff) in a thread slot of the caller's uid; before it does, it makes sure
    # another thread is left waiting (a new one starts only when none is). Without a slot, the reading
    # waits in the uid's queue (`budget`); calls read together are queued, and a queued call wakes a
    # thread.
    def spawn(self) -> None:
        """One more thread. It runs driver calls, so it is a driver thread (`qos.threads`): the process's
        exit waits for the call it is in (an OpenVINO inference still running while the interpreter
        finalizes aborts the process) and tells it to stop first; none starts once the process exits."""
        with self._lock:
            self._threads += 1
        try:
            threads.start(self._thread, name="nnapi-service", stop=self.stop)
        except threads.ProcessExiting:
            with self._lock:
                self._threads -= 1

    def _keep_one_waiting(self) -> None:
        """Start a thread if none is left waiting for I/O (this one is about to read or run a call)."""
        if self._waiting:  # (the common case, seen without the lock)
            return
        with self._lock:
            spawn = self._waiting == 0 and self._threads < self.max_threads
        if spawn:
            self.spawn()

    def _thread(self) -> None:
        ran_ns = 0  # how long the call this thread last ran took (0: it ran none)
        try:
            while not self.stopping.is_set():
                try:
                    task = self._next_task(poll_window(ran_ns) if ran_ns else 0)
                except _Retire:
                    return
                ran_ns = 0
                if task is None:
                    continue
                self._keep_one_waiting()
                start = time.monotonic_ns()
                try:
                    task.run()
                except Exception:
                    log.exception("a service call failed outside its error handling")
                finally:
                    self.service.budget.release(task.uid)
                ran_ns = max(1, time.monotonic_ns() - start)
        finally:
            with self._lock:
                self._threads -= 1

    def _next_task(self, poll_ns: int = 0) -> Task | None:
        """A queued task that may run now, else wait for one event and handle it (accept, read, inline
        calls); the task returned holds a thread slot of its uid. A thread that just answered a call
        polls for `poll_ns` first, unless another thread already polls: a client's next call usually
        follows its answer at once, and then finds a thread awake."""
        task = self.service.budget.next()
        if task is not None:
            return task
        with self._lock:
            self._waiting += 1
            poll = poll_ns and not self._polling
            if poll:
                self._polling = True
        try:
            events = None
            if poll:
                try:
                    events = poll_until(time.monotonic_ns() + poll_ns, lambda: self.epoll.poll(0, 1) or None)
                finally:
                    self._polling = False
            if not events:
                events = self.epoll.poll(self.service.idle_retire_s, 1)
        finally:
            with self._lock:
                self._waiting -= 1
        if not events:  # idle: retire while another thread is left waiting (not merely busy in a call)
            with self._lock:
                if self._waiting > 0 and not self.stopping.is_set():
                    raise _Retire()
            return None
        fd, _ = events[0]
        if fd == self._wake_r:
            self._woken()
        elif fd == self._watched:
            log.info("the watched process exited: stopping")
            self.stop()
        elif self._listener is not None and fd == self._listener.fileno():
            self._accept()
            self._arm(fd)
        else:
            client = self.clients.get(fd)
            if client is not None:
                return self._on_readable(client)
        return None

    def _on_readable(self, client: Client) -> Task | None:
        """Read `client` in a thread slot of its uid (inline calls are answered here); the first call
        read is returned to run in that slot, the others are queued. Without a slot the reading waits
        in the uid's queue (the connection is not re-armed meanwhile, so it sends nothing more)."""
        uid = client.creds.uid
        if not self.service.budget.take(uid):
            self.queue(Task(uid, client, lambda: self._read_queued(client)))
            return None
        self._keep_one_waiting()
        tasks: list[Task] = []
        try:
            with self.service.foreground.held():  # LOW work gives way while a call is read
                self._readable(client, tasks)
        except BaseException:
            self.service.budget.release(uid)
            raise
        if not tasks:
            self.service.budget.release(uid)
            return None
        for task in tasks[1:]:
            self.queue(task)
        return tasks[0]

    def _read_queued(self, client: Client) -> None:
        """A reading that waited for a slot of its uid (it runs in that slot, and so does its first call)."""
        tasks: list[Task] = []
        with self.service.foreground.held():
            self._readable(client, tasks)
        for task in tasks[1:]:
            self.queue(task)
        if tasks:
            tasks[0].run()

    def queue(self, task: Task) -> None:
        self.service.budget.submit(task)
        self.wake()

    def _woken(self) -> None:
        try:
            os.read(self._wake_r, 1)  # one byte: one thread's worth of news
        except OSError:
            pass
        if self.stopping.is_set():
            self.wake()  # pass the news on to every other thread
            return
        with self._lock:
            closing, self._to_close = self._to_close, []
        for client in closing:
            self.drop(client)

    def _arm(self, fd: int) -> None:
        try:
            self.epoll.modify(fd, _ARMED)
        except (OSError, ValueError):
            pass

    # --- I/O ------------------------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors: refuse this one, keep serving the others
                log.warning("accept failed: %s", e)
                return
            try:
                creds = peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            if len(self.clients) >= self.service.max_connections:
                self._refuse(creds, f"the service holds {len(self.clients)} connections already")
                sock.close()
                continue
            if not self.service.budget.connect(creds.uid):
                self._refuse(creds, f"uid {creds.uid} holds {self.service.budget.max_connections} connections already")
                sock.close()
                continue
            sock.settimeout(self.service.send_timeout)
            client = Client(self.service, sock, creds)
            with self._lock:
                self.clients[sock.fileno()] = client
            self.epoll.register(sock.fileno(), _ARMED)
            self.service.waiter.at(time.monotonic() + HELLO_TIMEOUT, lambda c=client: self._hello_due(c))
            log.debug("connected: %s", client)

    def _refuse(self, creds: Credentials, why: str) -> None:
        """Log a refused connection: at most once per uid every 10 s, with how many were refused since."""
        now = time.monotonic()
        with self._lock:
            last, since = self._refusals.get(creds.uid, (-1e9, 0))
            if now - last < 10.0:
                self._refusals[creds.uid] = (last, since + 1)
                return
            self._refusals[creds.uid] = (now, 0)
        log.warning("refusing a connection of pid %d uid %d: %s%s", creds.pid, creds.uid, why,
                    f" ({since} more refused in the last 10 s)" if since else "")

    def _hello_due(self, client: Client) -> None:
        """(the waiting thread) A connection that has not said hello by now is closed."""
        if not client.greeted and not client.closed:
            log.info("%s: no hello within %g s; closing the connection", client, HELLO_TIMEOUT)
            self.request_close(client)

    def drop(self, client: Client) -> None:
        """Close a connection: free what it owns, cancel its queued calls and end its waiting ones."""
        if not client.io_lock.acquire(timeout=0.05):  # a thread reads it (and answers): not for long...
            try:
                client.sock.shutdown(socket.SHUT_RDWR)  # ...unless an answer is stuck: it returns at once
            except OSError:
                pass
            client.io_lock.acquire()
        counted = False
        try:
            fd = client.sock.fileno()
            if fd < 0:
                return
            try:
                self.epoll.unregister(fd)
            except (OSError, ValueError):
                pass
            with self._lock:
                if self.clients.get(fd) is client:
                    del self.clients[fd]
                    counted = True
            log.debug("disconnected: %s", client)
            client.close()
        finally:
            client.io_lock.release()
        if counted:
            self.service.budget.disconnect(client.creds.uid)
        for task in self.service.budget.cancel(client):  # queued calls never start
            if task.cancel is not None:
                task.cancel()
        for cancel in self.service.waiter.drop(client):  # waits for fences end
            cancel()

    def _readable(self, client: Client, tasks: list[Task]) -> None:
        """Read what `client` sent: calls to run go to `tasks`; re-arm it, or drop it."""
        with client.io_lock:
            if client.closed:
                return
            keep = self._read(client, tasks)
            if keep:
                self._arm(client.sock.fileno())
        if not keep:
            self.drop(client)

    def _read(self, client: Client, tasks: list[Task]) -> bool:
        try:
            data, fds = recv_chunk(client.sock)
        except (BlockingIOError, InterruptedError, socket.timeout):
            return True
        except (OSError, ProtocolError) as e:
            log.info("%s: receive failed (%s); dropping the connection", client, e)
            return False
        if not data:
            close_fds(fds)
            return False
        try:
            frames = client.decoder.feed(data, fds)
        except ProtocolError as e:
            log.info("%s: %s; dropping the connection", client, e)
            return False
        for body, frame_fds in frames:
            if not self.service.dispatch(client, body, frame_fds, tasks):
                return False
        return True

