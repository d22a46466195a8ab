"""Whether the Ray cluster named by ``RAY_ADDRESS`` is one, and answers: checked before any work, within
``ray_timeout()`` seconds (``--ray-timeout``, ``REFINERY_RAY_TIMEOUT``), so that an address that does not answer,
answers as something else (an S3 server, a proxy, another gRPC service) or refuses the driver ends the run in one
``RayUnreachable`` line naming it, where Ray's own connect retries it for many minutes."""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time

from refinery.messages import Message, Refusal, Setting

RAY_TIMEOUT = 30.0  # seconds the cluster at RAY_ADDRESS may take to answer before the run fails
RAY_TIMEOUT_ENV = "REFINERY_RAY_TIMEOUT"   # set by ``refinery --ray-timeout`` and ``jobs/run.py --ray-timeout``
JOIN_MARGIN = 10.0  # seconds ray.init may take beyond the deadline once the head answered (it starts the driver's side)
DEADLINE = Message(Setting("ray_timeout"), " sets the deadline")   # how a message of a cluster too slow ends


class RayUnreachable(ConnectionError):
    """The cluster at ``RAY_ADDRESS`` did not answer in time, or refused the driver: the user's setting
    to fix (a ``ConnectionError``, so the command line exits 2)."""

    code = "cluster"


def ray_timeout() -> float:
    """Seconds the cluster at ``RAY_ADDRESS`` may take to answer: ``REFINERY_RAY_TIMEOUT``, else ``RAY_TIMEOUT``."""
    value = os.environ.get(RAY_TIMEOUT_ENV)
    try:
        timeout = float(value) if value else RAY_TIMEOUT
    except ValueError:
        timeout = 0.0
    if not timeout > 0:
        raise Refusal(f"{RAY_TIMEOUT_ENV}={value!r} is not a number of seconds above 0", code="invalid-setting")
    return timeout


def check_ray_address() -> None:
    """Fail in one line, within ``ray_timeout()`` seconds, unless the cluster at ``RAY_ADDRESS`` (when set)
    answers: something must accept a connection there, and speak gRPC as a Ray head's GCS (or its Ray
    Client server, ``ray://``) does. Ray's own ``ray.init`` retries a silent address for many minutes."""
    token_mode = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    if token_mode and not _auth_token_given():
        raise RayUnreachable("RAY_AUTH_MODE asks for token authentication, but no token is set: put the head's token in RAY_AUTH_TOKEN, in "
                             "the file RAY_AUTH_TOKEN_PATH names or in ~/.ray/auth_token (`ray get-auth-token` on "
                             "the head prints it), or unset RAY_AUTH_MODE for a cluster without authentication")
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address in ("", "auto", "local"):
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if "://" in target or not host or not port.isdigit():
        hint = " (that is the address `ray job submit` takes, the head's dashboard)" if "://" in target else ""
        raise RayUnreachable(f"RAY_ADDRESS={address} is not a Ray cluster's address{hint}: give the head's "
                             "HOST:PORT as `ray start --head` printed it (port 6379 by default), or unset "
                             "RAY_ADDRESS for a local Ray")
    timeout, started = ray_timeout(), time.monotonic()
    fix = Message(f"is the head running? (`ray status --address {target}`); ", DEADLINE)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        reason = f"no answer within {timeout:g} s" if isinstance(e, TimeoutError) else \
            (e.strerror or type(e).__name__).lower()
        raise RayUnreachable(Message(f"the Ray cluster at RAY_ADDRESS={address} does not answer ({reason}); ", fix)) \
            from None
    if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
        return   # a TLS cluster's handshake needs its certificates: ray.init does it
    import grpc

    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=max(0.1, timeout - (time.monotonic() - started)))
        if target == address:   # a GCS (a Ray Client server, ray://, speaks another protocol)
            _check_ray_head(channel, address, max(0.1, timeout - (time.monotonic() - started)), token_mode)
    except grpc.FutureTimeoutError:
        raise RayUnreachable(Message(f"RAY_ADDRESS={address} accepts connections, but no Ray head answered there "
                                     f"within {timeout:g} s: give the head's GCS port (6379 by default), not the "
                                     "dashboard's (8265); ", fix)) from None
    finally:
        channel.close()


def _auth_token_given() -> bool:
    """Whether a token for Ray's token authentication is set where Ray looks for one."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    return bool(os.environ.get("RAY_AUTH_TOKEN", "").strip()) or (os.path.isfile(path) and os.path.getsize(path) > 0)


def _check_ray_head(channel, address: str, timeout: float, token_mode: bool) -> None:
    """Ask the GCS at ``address`` its cluster id, as ``ray.init`` does (no token sent): a Ray head answers it, or
    with token authentication refuses it as unauthenticated. Anything else that speaks HTTP/2 there (an S3 server,
    a proxy, another gRPC service) is not a Ray head: said at once, where Ray would retry it for many minutes. A
    head with token authentication and no ``RAY_AUTH_MODE=token`` here is said too."""
    import grpc

    ask = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")
    try:
        ask(b"", timeout=timeout)
    except grpc.RpcError as e:
        code = e.code()
        if code == grpc.StatusCode.UNAUTHENTICATED:
            if token_mode:
                return   # expected without the token; ray.init sends it
            raise RayUnreachable(f"the Ray cluster at RAY_ADDRESS={address} asks for a token (its head runs with "
                                 "token authentication); set RAY_AUTH_MODE to token here too, with the head's token "
                                 "in RAY_AUTH_TOKEN or in ~/.ray/auth_token") from None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise RayUnreachable(Message(f"RAY_ADDRESS={address} accepts connections, but no Ray head answered there "
                                         f"within {timeout:g} s; ", DEADLINE)) from None
        raise RayUnreachable(f"RAY_ADDRESS={address} answers, but not as a Ray head ({code.name.lower()}): give the "
                             "head's GCS address as `ray start --head` printed it (port 6379 by default)") from None


def join_cluster(address: str, env_vars: dict | None = None) -> None:
    """``ray.init(address)``, waited for from outside, at most ``ray_timeout()`` + ``JOIN_MARGIN`` seconds: a head
    that answers the check (``check_ray_address``) may still keep Ray's connect retrying for many minutes (a wrong
    token, a head of another Ray version), deaf to Ctrl-C. Past the deadline the run ends in one ``RayUnreachable``
    line, and Ctrl-C or SIGTERM end it at once; the connect left behind ends with the process. ``env_vars``: set in
    every worker of the job (the run's memory budget)."""
    import ray

    deadline = ray_timeout() + JOIN_MARGIN
    done, failed = threading.Event(), []

    def connect():
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True,
                     **({"runtime_env": {"env_vars": env_vars}} if env_vars else {}))
        except BaseException as e:  # noqa: BLE001 — raised again by the waiting thread
            failed.append(e)
        finally:
            done.set()

    worker_log = logging.getLogger("ray._private.worker")
    worker_log.addFilter(_not_main_thread_notice)   # refinery's own SIGTERM handler stays: nothing to say
    with _stderr_silenced():   # Ray's core writes each retry to the process's stderr: the run says one line
        threading.Thread(target=connect, name="ray-connect", daemon=True).start()
        joined = done.wait(deadline)
    if not joined:
        raise RayUnreachable(Message(f"the Ray cluster at RAY_ADDRESS={address} answered, but joining it took longer "
                                     f"than {deadline:g} s (is RAY_AUTH_TOKEN the head's token, and Ray "
                                     f"{ray.__version__} the head's version?); ", DEADLINE))
    if failed:
        raise failed[0]


@contextlib.contextmanager
def _stderr_silenced():
    """The process's standard error (file descriptor 2, where Ray's C++ core logs) sent nowhere inside."""
    sys.stderr.flush()
    saved, sink = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 2)
    os.close(sink)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _not_main_thread_notice(record: logging.LogRecord) -> bool:
    return "not the main thread" not in record.getMessage()
