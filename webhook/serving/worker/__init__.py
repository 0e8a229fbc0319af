"""The gunicorn worker: ``gthread``, except that requests are read whole on the main loop
before a thread serves them, a failure on a connection costs that connection only, answers
are finished on the main loop within a deadline, connections are closed without blocking
that loop, and a worker holding more connections than a sibling lets that sibling accept the
next one. gunicorn loads it by the path ``webhook.serving.worker.BalancedThreadWorker``.

Its parts, each a module with the why in its docstring:
- ``reading``: the main loop (``ReadingWorker``): TLS handshake and whole requests read
  without blocking, hand-off to a thread (or a small review answered on the loop when
  nothing else waits), failures, ``Expect``, deadlines;
- ``framing``: where a request's head and body end in the bytes read so far;
- ``answers``: writing an answer without waiting (the rest to the main loop) and the head of
  a plain request's answer;
- ``finishing``: the main loop sending the rest of an answer, and closing without blocking;
- ``threads``: the serving threads, in place of gthread's executor, and the queue that
  wakes the main loop when they are done;
- ``settings``: gunicorn's settings read once per worker;
- ``balanced``: connections spread across workers (``BalancedThreadWorker``).
"""

from __future__ import annotations

from webhook.serving.worker.balanced import FREE, BalancedThreadWorker, ConnectionTable

__all__ = ["FREE", "BalancedThreadWorker", "ConnectionTable"]
