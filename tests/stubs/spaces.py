"""A stand-in for Hugging Face's `spaces` package, for tests only (tests/test_zerogpu.py puts this folder on
PYTHONPATH of an app subprocess; nothing else imports it).

`spaces.GPU` behaves as on ZeroGPU: usable as `@spaces.GPU`, `@spaces.GPU(duration=...)` and
`spaces.GPU(duration=120)(fn)`; each call runs in a freshly forked child process; the arguments and the result
(or the exception) cross the process boundary pickled; whatever the child changes in memory (a decoder's state,
a module global) is lost when it exits; a call that runs past `duration` seconds is killed and fails.
Without SPACES_ZERO_GPU in the environment it is a no-op, as the real package is outside ZeroGPU.

If EAGLE_LENS_SPACES_STUB_LOG names a file, every call appends one line to it from the child:
"<child pid> <parent pid> <function name>", so a test can check that the work really ran in another process.
"""
from __future__ import annotations

import functools
import os
import pickle
import select
import signal
import struct
import time

__all__ = ["GPU"]
LOG_ENV = "EAGLE_LENS_SPACES_STUB_LOG"
_HEADER = struct.Struct("<Q")


class GPUTaskAborted(RuntimeError):
    """The call ran past its duration (ZeroGPU aborts it) or the worker died without an answer."""


def GPU(fn=None, *, duration=60, **_ignored):
    """`@GPU`, `@GPU(duration=...)` or `GPU(duration=...)(fn)`. `duration` may be a callable of the arguments.
    Like the real package, a no-op (the function itself) unless SPACES_ZERO_GPU is set."""
    if fn is None:
        return lambda f: GPU(f, duration=duration)
    if not callable(fn):
        raise TypeError("spaces.GPU expects a function, or keyword arguments only")
    return _wrap(fn, duration) if os.environ.get("SPACES_ZERO_GPU") else fn


def _log(name: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {os.getppid()} {name}\n".encode())
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _child(fd: int, fn, payload: bytes) -> None:
    """Runs in the forked worker: never returns."""
    code = 0
    try:
        try:
            _log(getattr(fn, "__qualname__", repr(fn)))
            args, kwargs = pickle.loads(payload)
            out = pickle.dumps((True, fn(*args, **kwargs)))       # an unpicklable result fails here, as on ZeroGPU
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            try:
                out = pickle.dumps((False, exc))
            except Exception:   # an exception that does not pickle: its text does
                out = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        _write_all(fd, _HEADER.pack(len(out)) + out)
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)   # no atexit handlers, no gradio/torch teardown in the worker


def _read_exact(fd: int, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _wrap(fn, duration):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        seconds = float(duration(*args, **kwargs) if callable(duration) else duration)
        payload = pickle.dumps((args, kwargs))        # arguments must pickle, as on ZeroGPU
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _child(w, fn, payload)
        os.close(w)
        try:
            deadline = time.monotonic() + seconds
            try:
                size = _HEADER.unpack(_read_exact(r, _HEADER.size, deadline))[0]
                ok, value = pickle.loads(_read_exact(r, size, deadline))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise GPUTaskAborted(f"GPU task aborted: {fn.__name__} ran past its {seconds:g} s") from None
            except EOFError:
                raise GPUTaskAborted(f"GPU task aborted: the worker for {fn.__name__} died") from None
        finally:
            os.close(r)
            os.waitpid(pid, 0)
        if ok:
            return value
        raise value
    call.__wrapped_for_zerogpu__ = True
    return call
