"""``gthread``, except that requests are read whole on the main loop before a thread serves
them, a failure on a connection costs that connection only, answers are finished on the
main loop within a deadline (``webhook.serving.worker.answers``), and connections are closed
without blocking that loop (``webhook.serving.worker.finishing``).

Reading (see ``ReadingWorker``). ``gthread`` hands a connection to one of its few threads
as soon as it is accepted or readable, and the thread then does the TLS handshake and reads
the request line, headers and body with blocking calls and no timeout. A client that never
finishes any of them holds the thread for good, and eight such clients (two workers of four
threads) stall every review. Here the main loop does the handshake and reads the request
without blocking, and a thread gets the connection only once its whole request is buffered;
a connection that has not delivered its request within ``READ_TIMEOUT_SECONDS`` of its
first byte (of accepting it, for the handshake) is dropped. Slow and idle connections then
cost a file descriptor and a poller slot, never a thread, and there are at most
``worker_connections`` of them per worker. Bodies over ``LARGE_BODY_BYTES`` are read one at
a time per worker: a review of several megabytes takes about twelve times its size in
memory while it is parsed, and a pod of many containers far more (a 731 KiB pod of 19,000
containers tolerating the GPU taint peaks at 65 MiB with its patch: several at once in a
worker, as four slow readers sent them, took the pod's processes to 414 MiB, past its 384
MiB limit; one at a time, to about 372 MiB). A thread's own reads time out after
``IO_TIMEOUT_SECONDS``; its writes never wait (``webhook.serving.worker.answers``).

Serving. A request the API server sends (``webhook.serving.plainrequest``: POST, HTTP/1.1,
a declared length, ordinary headers) is answered without gunicorn's parser and response,
which cost more than the engine's review of a unique pod; anything else goes through
gunicorn as in gthread. A request is answered by a thread, except a small plain review
that nothing else waits for (see "Inline" below).

Inline. Answering every small plain review on the main loop saved the hand-off (a fifth of
a worker's time on unique pods) but a review then waited behind every review before it on
that loop, and with the two soaks side by side valid reviews took 2 to 4 s where threads
keep them under 0.3 s. So the main loop answers a review itself only when the poller woke
for that one connection alone, no thread holds a request of this worker, nothing was
pipelined behind it, its body is at most ``INLINE_BODY_BYTES`` and it cannot read from the
API server (``lookups.may_read``: the lookups of ``webhook.admission.lookups`` are bounded
by a second, which the loop must not spend). Under load the poller wakes for several
connections at once and every review goes to a thread as before; an idle worker saves the
two hand-offs (the queue to a thread and the pipe back), each a wake-up of another thread.

Failures. Whatever goes wrong on one connection costs that connection only. Wrapping a
socket in TLS reads it when the client is already gone (``ssl.py`` raises "Closed before TLS
handshake" or the reset itself), and it ran in ``accept`` on the main loop: one client that
connected and reset (``SO_LINGER`` 0) ended a worker, forty ended forty (gthread wraps in a
thread for that reason). A reset, a TLS alert or garbage for a ClientHello, and an EOF
during the handshake, in the head or in the body drop the connection; a client that shut
only its write side after a whole request gets its answer, then the connection closes. On
top of that, a connection's poller callback that raises anything else drops that connection
with the error logged (``wait_for_and_dispatch_events``), so a bug there cannot end a worker
either; the listener's and the method queue's callbacks still raise as in gthread.

Expect. A ``100 Continue`` is sent on the main loop when the head asks for one and the body
is not all there yet; gunicorn's own (``http/wsgi.py``) is turned off, since by the time a
thread parses the request its body has arrived. The API server's client (Go's net/http)
adds no ``Expect`` of its own; curl asks before a large body.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import ssl
import time
from collections import deque
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn import sock as gsock
from gunicorn.workers.gthread import TConn, ThreadWorker

from webhook.admission.lookups import may_read
from webhook.admission.review import MAX_BODY_BYTES
from webhook.serving.plainrequest import (
    PlainRequest,
    base_of,
    limits_of,
    plain_request,
    script_name_set,
    wsgi_environ,
)
from webhook.serving.worker.answers import IO_TIMEOUT_SECONDS, Coalescing, Outbox, PlainAnswer
from webhook.serving.worker.finishing import Finishing, nonblocking
from webhook.serving.worker.framing import (
    EXPECT_CONTINUE,
    MAX_HEAD_BYTES,
    request_end,
    request_head,
)
from webhook.serving.worker.settings import SettledConfig, hooked
from webhook.serving.worker.threads import ServingThreads, WakingQueue

READ_TIMEOUT_SECONDS = 10.0
STOP_LINGER_SECONDS = 2.0  # idle kept-alive connections stay this long after SIGTERM
LARGE_BODY_BYTES = 256 * 1024
SWEEP_SECONDS = 0.25
DRAIN_SECONDS = 0.05
ANSWER_SECONDS = 10.0  # the API server's default timeoutSeconds: it waits no longer
# The heartbeat gunicorn's master reads (a file's mtime): ``timeout`` is 8 s, and touching
# it on every turn of a busy loop was a system call per review.
NOTIFY_SECONDS = 1.0
INLINE_BODY_BYTES = 16 * 1024
INLINE_PATHS = frozenset({"/mutate", "/validate"})


class ReadingWorker(Finishing, ThreadWorker):  # type: ignore[misc]
    """``gthread`` that reads each request whole on its main loop before a thread serves
    it, and closes connections without blocking that loop (see the module docstring)."""

    cfg: Any
    alive: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg = SettledConfig(self.cfg)
        self.method_queue = WakingQueue()
        self._next_notify = 0.0
        self._open: set[TConn] = set()  # what ``nr_conns`` counts
        self._reading: dict[TConn, float] = {}  # connection -> when it is dropped
        self._lingering: dict[TConn, float] = {}
        self._writing: dict[TConn, tuple[float, bool]] = {}  # -> (deadline, keep alive)
        self._writing_bytes = 0
        self._parked: deque[TConn] = deque()  # large bodies waiting for their turn
        self._large: TConn | None = None
        self._next_sweep = 0.0
        self._stopping_since: float | None = None
        self._plain_limits = limits_of(self.cfg, body=MAX_BODY_BYTES)
        self._plain = not script_name_set() and not hooked(self.cfg)
        self._plain_base = base_of(self.cfg, scheme="https" if self.cfg.is_ssl else "http")
        self._in_threads: set[TConn] = set()  # handed to a thread, not yet finished
        self._alone = False  # the poller's last turn woke for one connection only

    def get_thread_pool(self) -> ServingThreads:
        """gthread's ``init_process`` calls this after the fork (see ``ServingThreads``)."""
        return ServingThreads(self.cfg.threads, serve=self.handle, done=self._served)

    def enqueue_req(self, conn: TConn) -> None:
        self.tpool.submit(conn)

    def _served(self, conn: TConn, keep: bool) -> None:
        """In the serving thread: the main loop finishes the connection."""
        self.method_queue.defer(self._finished, conn, keep)

    def notify(self) -> None:
        """The heartbeat, at most every ``NOTIFY_SECONDS`` (gthread's loop calls this on
        every turn)."""
        now = time.monotonic()
        if now >= self._next_notify:
            self._next_notify = now + NOTIFY_SECONDS
            super().notify()

    # --- accepting --------------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                self.log.warning("cannot accept a connection: %s", exc.strerror)
                self._out_of_descriptors()
            elif exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        conn = TConn(self.cfg, client, address, listener.getsockname())  # non-blocking
        self._opened(conn)
        conn.pending = bytearray()
        conn.head = None
        conn.continued = False
        conn.handshaken = not self.cfg.is_ssl
        conn.ended = False
        conn.outbox = None
        conn.plain = None
        conn.rest = b""
        conn.polled = False  # registered with the poller for ``_readable``
        conn.serving = False  # a thread has it
        try:
            if self.cfg.is_ssl:
                # Wrapping reads the socket when the client is gone already (ssl.py's
                # "Closed before TLS handshake"), and raises its reset: gthread wraps in a
                # thread for that reason; here it costs this connection only.
                conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                    client, server_side=True, do_handshake_on_connect=False
                )
            else:
                self._start_parser(conn)
            self._watch(conn, time.monotonic() + READ_TIMEOUT_SECONDS)
        except (OSError, ValueError):
            self._drop(conn)

    def _opened(self, conn: TConn) -> None:
        self._open.add(conn)
        self.nr_conns = len(self._open)

    def _closed(self, conn: TConn) -> None:
        """Idempotent: a connection that two paths close counts once. gthread subtracts
        from ``nr_conns`` on each path instead, and a close that raised after the count was
        taken off took it off again (``finish_request``'s ``except``): every client that
        reset a connection mid-request made its worker's count drift below zero, and the
        balanced worker's siblings read a count below zero as "not serving"."""
        self._open.discard(conn)
        self.nr_conns = len(self._open)

    def _out_of_descriptors(self) -> None:
        """Hook: no descriptor for a new connection (the balanced worker pauses accepting)."""

    def _start_parser(self, conn: TConn) -> None:
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.initialized = True  # gthread's init() (handshake, parser) is done here

    # --- reading on the main loop -------------------------------------------------------

    def _watch(self, conn: TConn, deadline: float) -> None:
        self._reading[conn] = deadline
        if not conn.polled:
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))
            conn.polled = True

    def _unwatch(self, conn: TConn) -> None:
        self._reading.pop(conn, None)
        self._unpoll(conn)

    def _unpoll(self, conn: TConn) -> None:
        conn.polled = False
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)

    def _readable(self, conn: TConn, _fileobj: Any = None) -> None:
        if conn.serving:  # what arrives meanwhile waits for the thread to finish
            self._unpoll(conn)
            return
        try:
            if not conn.handshaken and not self._handshake(conn):
                return
            fresh = not conn.pending
            if not self._receive(conn):
                self._ended(conn)
                return
        except (OSError, ValueError):  # ssl.SSLError is an OSError
            self._drop(conn)
            return
        self._progress(conn, fresh=fresh)

    def _ended(self, conn: TConn) -> None:
        """The client closed its end: a whole request it sent first (it only shut its
        write side) is answered, and the connection then closed; anything less is dropped."""
        head = conn.head
        whole = head is not None and request_end(conn.pending, head) is not None
        if not whole or self._waits_its_turn(conn):
            self._drop(conn)
            return
        conn.ended = True
        self._progress(conn, fresh=False)

    def _handshake(self, conn: TConn) -> bool:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLWantWriteError:
            self.poller.modify(
                conn.sock,
                selectors.EVENT_READ | selectors.EVENT_WRITE,
                partial(self._readable, conn),
            )
            return False
        conn.handshaken = True
        self.poller.modify(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))
        self._start_parser(conn)
        return True

    def _receive(self, conn: TConn) -> bool:
        """What is readable now, into ``conn.pending``; False at the client's end. A large
        body waiting for its turn is left in the socket."""
        limit = MAX_BODY_BYTES + MAX_HEAD_BYTES + 65536
        while len(conn.pending) < limit:
            try:
                data = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return True
            if not data:
                return False
            conn.pending += data
            if conn.head is None:
                conn.head = request_head(conn.pending)
            if conn.head is not None and self._waits_its_turn(conn):
                return True
        return True

    def _waits_its_turn(self, conn: TConn) -> bool:
        large = conn.head[1] > LARGE_BODY_BYTES or conn.head[1] < 0
        return large and self._large is not None and self._large is not conn

    def _progress(self, conn: TConn, *, fresh: bool) -> None:
        if fresh and conn.pending:  # a request began: it has READ_TIMEOUT_SECONDS to arrive
            now = time.monotonic()
            self._reading[conn] = min(self._reading[conn], now + READ_TIMEOUT_SECONDS)
        head = conn.head
        if head is None:
            return
        if head[1] > LARGE_BODY_BYTES or head[1] < 0:
            if self._waits_its_turn(conn):
                conn.parked_deadline = self._reading[conn]
                self._unwatch(conn)
                self._parked.append(conn)
                return
            self._large = conn
        end = request_end(conn.pending, head)
        if end is not None:
            self._reading.pop(conn, None)  # a thread has it: no read deadline
            self._dispatch(conn, end)
        elif not conn.continued and EXPECT_CONTINUE.search(bytes(conn.pending[: head[0]]).lower()):
            conn.continued = True  # curl waits for this before sending a large body
            with contextlib.suppress(OSError):
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _dispatch(self, conn: TConn, end: int) -> None:
        """The whole request is buffered: it is served without gunicorn's parser when it is
        plain (``webhook.serving.plainrequest``); a thread serves it either way. What follows a
        plain request waits in ``conn.rest`` for the next turn.

        A plain request's socket stays non-blocking, as the main loop has it: its thread
        reads nothing and writes without waiting (``Outbox``), and each switch of mode is
        two ``fcntl`` calls, each letting go of the interpreter lock (in a profile of a worker
        under load, the four switches per review took 3.9 s of its threads' 34 s, nearly all
        of it waiting to take the lock back behind another thread's review). It also stays
        registered with the poller while the thread serves it, so that a kept-alive
        connection costs no unregistering and registering (two ``epoll_ctl`` and the
        selector's bookkeeping) per request; should it turn readable meanwhile,
        ``_readable`` unregisters it then."""
        plain = None
        if self._plain and isinstance(conn.server, tuple):
            plain = plain_request(
                conn.pending, body_start=conn.head[0], end=end, limits=self._plain_limits
            )
        if plain is not None:
            conn.plain = plain
            conn.rest = bytes(conn.pending[end:])
            if self._inline(conn, plain):
                return
        else:
            conn.parser.unreader.unread(bytes(conn.pending))
            self._unpoll(conn)  # gunicorn's path may close the socket in the thread
            conn.sock.settimeout(IO_TIMEOUT_SECONDS)  # its parser reads in the thread
        conn.serving = True
        conn.pending = bytearray()
        self._in_threads.add(conn)
        self.enqueue_req(conn)

    def _inline(self, conn: TConn, plain: PlainRequest) -> bool:
        """Serve ``plain`` here on the main loop when nothing else waits for it (see
        "Inline" in the module docstring); False leaves it to a thread."""
        if not (
            self._alone
            and not self._in_threads
            and not conn.rest
            and len(plain.body) <= INLINE_BODY_BYTES
            and plain.path in INLINE_PATHS
            and not may_read(plain.body)
        ):
            return False
        conn.serving = True
        conn.pending = bytearray()
        try:
            keep = self.handle(conn)
        except Exception:  # as in a thread (``ServingThreads``): the connection closes;
            keep = False  # gunicorn's SIGQUIT ``sys.exit`` still ends the worker, as in gthread
        self._finished(conn, keep)
        return True

    def _drop(self, conn: TConn) -> None:
        self._unwatch(conn)
        self._release_large(conn)
        self._closed(conn)
        conn.close()

    def _release_large(self, conn: TConn) -> None:
        if self._large is not conn:
            return
        self._large = None
        now = time.monotonic()
        while self._parked:
            waiting = self._parked.popleft()
            if waiting.parked_deadline <= now:
                self._closed(waiting)
                waiting.close()
                continue
            self._large = waiting
            self._watch(waiting, waiting.parked_deadline)
            self._readable(waiting)  # what arrived while it waited is in the socket
            return

    # --- serving in a thread ----------------------------------------------------------

    def handle(self, conn: TConn) -> bool:
        """gthread's ``handle`` for a connection whose request is already buffered: the
        answer is written as far as the socket takes it now, and what is left goes to the
        main loop (``conn.outbox``); the reads left (a body drained) time out."""
        req = None
        try:
            plain, conn.plain = conn.plain, None
            if plain is not None:
                return self._handle_plain(conn, plain)
            req = next(conn.parser)
            if not req:
                return False
            # The body is all here: a 100 Continue was sent on the main loop if the client
            # waited for one, and gunicorn would send a second (gunicorn/http/wsgi.py).
            req._expected_100_continue = False
            conn.answer_deadline = time.monotonic() + ANSWER_SECONDS
            sock = conn.sock
            outbox = Outbox(sock)
            conn.sock = Coalescing(outbox)
            sock.settimeout(0.0)
            try:
                keep = self.handle_request(req, conn)
                conn.sock.flush()
            finally:
                conn.sock = sock
                sock.settimeout(IO_TIMEOUT_SECONDS)
            if outbox.unsent:
                conn.outbox = outbox
            return bool(self._keepalive_after(conn, keep))
        except (http.errors.NoMoreData, StopIteration, TimeoutError):
            return False
        except ssl.SSLError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.warning("socket error serving a request: %s", exc)
            return False
        except Exception as exc:  # what gthread does: a 400 for what the parser refused
            self.handle_error(req, conn.sock, conn.client, exc)
        return False

    def _handle_plain(self, conn: TConn, plain: PlainRequest) -> bool:
        """``handle`` for a plain request: gthread's ``handle_request`` without gunicorn's
        parser and ``Response``; the answer is written in one piece through the outbox."""
        conn.answer_deadline = time.monotonic() + ANSWER_SECONDS
        self.nr += 1
        close = plain.close or not self.alive or not self.cfg.keepalive
        if self.nr >= self.max_requests:
            if self.alive:
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
            close = True
        environ = wsgi_environ(plain, base=self._plain_base, client=conn.client, server=conn.server)
        answer = PlainAnswer()
        chunks = self.wsgi(environ, answer.start_response)
        try:
            body = b"".join(chunks)
        finally:
            if hasattr(chunks, "close"):
                chunks.close()
        data = answer.encode(body, close=close)
        sock = conn.sock
        outbox = Outbox(sock)
        timeout = sock.gettimeout()  # 0.0 from ``_dispatch``; the outbox never waits
        if timeout != 0.0:
            sock.settimeout(0.0)
        try:
            outbox.sendall(data)
        finally:
            if timeout != 0.0:
                sock.settimeout(timeout)
        if outbox.unsent:
            conn.outbox = outbox
        return not close

    def _keepalive_after(self, conn: TConn, keepalive: bool) -> bool:
        """What the app left of the body is dropped from the buffer; a body still arriving
        (one over the cap) closes the connection instead of holding this thread."""
        if not keepalive:
            return False
        return bool(conn.parser.finish_body(deadline=time.monotonic() + DRAIN_SECONDS))

    def _finished(self, conn: TConn, keep: bool) -> None:
        """On the main loop, after a thread served a request."""
        self._in_threads.discard(conn)
        conn.serving = False
        self._release_large(conn)
        outbox, conn.outbox = conn.outbox, None
        if conn.polled and (outbox is not None or not keep or conn.ended):
            self._unpoll(conn)  # it is written to or closed from here: other callbacks
        try:
            if outbox is not None:
                self._write_later(conn, outbox, keep=keep)
            else:
                self._answered(conn, keep=keep)
        except (OSError, ValueError):
            self._abandon(conn)
        except Exception:  # run from the method queue: raising here would end the worker
            self.log.exception("dropped a connection after an error on it")
            self._abandon(conn)

    def _answered(self, conn: TConn, *, keep: bool) -> None:
        if keep and not conn.ended:
            self._keep(conn)
        else:
            self._linger(conn)

    def _keep(self, conn: TConn) -> None:
        nonblocking(conn.sock)
        rest, conn.rest = conn.rest, b""
        conn.pending = bytearray(rest + conn.parser.unreader.take_buffered())  # pipelined
        conn.head = request_head(conn.pending)
        conn.continued = False
        now = time.monotonic()
        idle = self.cfg.keepalive if self.alive else STOP_LINGER_SECONDS
        self._watch(conn, now + idle)
        buffered = conn.sock.pending() if isinstance(conn.sock, ssl.SSLSocket) else 0
        if conn.pending or buffered:
            self._readable(conn)

    # --- deadlines ----------------------------------------------------------------------

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        """gthread's, except that a connection's callback that raises costs that
        connection only (see "Failures" in the module docstring)."""
        events = self.poller.select(min(timeout, SWEEP_SECONDS))
        self._alone = len(events) == 1
        for key, _ in events:
            callback = key.data
            try:
                callback(key.fileobj)
            except Exception:
                conn = connection_of(callback)
                if conn is None:
                    raise  # the listener's or the method queue's: gthread's own
                self.log.exception("dropped a connection after an error on it")
                self._abandon(conn)
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_SECONDS
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        if not self.alive and self._stopping_since is None:
            self._stopping_since = now
            last = now + STOP_LINGER_SECONDS
            for conn, deadline in self._reading.items():
                if not conn.pending:  # idle: answered with "Connection: close" meanwhile
                    self._reading[conn] = min(deadline, last)
        for conn in [c for c, deadline in self._reading.items() if deadline <= now]:
            self._drop(conn)
        for conn in [c for c, deadline in self._lingering.items() if deadline <= now]:
            self._end_linger(conn)
        for conn in [c for c, (deadline, _) in self._writing.items() if deadline <= now]:
            self._cut(conn)
        while self._parked and self._parked[0].parked_deadline <= now:
            expired = self._parked.popleft()
            self._closed(expired)
            expired.close()

    def _abandon(self, conn: TConn) -> None:
        """Forget ``conn`` wherever the main loop holds it, and close it."""
        self._reading.pop(conn, None)
        self._lingering.pop(conn, None)
        if conn in self._parked:
            self._parked.remove(conn)
        if conn in self._writing:
            self._cut(conn)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        with contextlib.suppress(Exception):
            self._release_large(conn)
        self._closed(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def run(self) -> None:
        super().run()
        for conn in [*self._reading, *self._lingering, *self._parked, *self._writing]:
            conn.close()


def connection_of(callback: Any) -> TConn | None:
    """The connection a poller callback serves (``partial(method, conn)``), if any."""
    args = getattr(callback, "args", ())
    return args[0] if args and isinstance(args[0], TConn) else None
