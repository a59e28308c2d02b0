"""Connecting to a Ray cluster, for both Ray executors (`runs.ray_executor`, `classroom.ray_grading`).

`connect(address)` refuses an address no Ray head answers on before any work (the address is in the
message), joins the cluster at `address`, or starts a local one on this machine.
"""

from __future__ import annotations

import socket

from tools.errors import ConfigError

CONNECT_TIMEOUT_S = 5.0
EXECUTORS = ("local", "ray")


def check_executor(executor: str, address: str | None) -> None:
    """Refuse, before any work, an unknown executor or a cluster address given without the Ray executor."""
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; --executor must be one of {', '.join(EXECUTORS)}")
    if executor == "local" and address is not None:
        raise ConfigError("--address names a Ray cluster; use it with --executor ray")


def _address_host_port(address: str) -> tuple[str, int]:
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--address {address!r}: give the head node as HOST:PORT (e.g. 10.0.0.5:6379) or 'auto'")
    return host, int(port)


def check_reachable(address: str) -> None:
    """Refuse, before any work, an address no Ray head answers on (the address is in the message)."""
    if address == "auto":
        return
    host, port = _address_host_port(address)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise ConfigError(f"cannot reach a Ray cluster at {address} ({error}); start one with `ray start --head` "
                          "or give the head node's address") from None


LOCAL_START_ATTEMPTS = 3


def connect(address: str | None, *, num_cpus: int | None = None):
    """`ray` connected to the cluster at `address`, or to a new local cluster of `num_cpus` CPUs.

    A local cluster is started again (up to LOCAL_START_ATTEMPTS times) when its node times out during
    startup: Ray's raylet gives its agent a fixed time to come up, which a loaded machine can miss."""
    import os

    import ray

    if address is not None:
        check_reachable(address)
    if ray.is_initialized():
        return ray
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        return ray
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
            return ray
        except Exception as error:  # Ray raises a bare Exception when its node times out during startup
            ray.shutdown()
            if "timed out during startup" not in str(error):
                raise
            if attempt == LOCAL_START_ATTEMPTS:
                raise ConfigError(f"the local Ray cluster did not start in {attempt} attempts ({error}); the machine "
                                  "may be overloaded: try again, or start one with `ray start --head`") from None
    return ray


SHUTDOWN_LIMIT_S = 60.0
"""How long an interrupted driver waits for Ray to shut down before it leaves it to Ray's own watchdogs."""
CANCEL_LIMIT_S = 30.0
"""How long an interrupted driver waits for Ray to take its cancellations before it goes on to shut down."""


def within(call, limit_s: float, name: str) -> bool:
    """Run `call()` in a daemon thread of its own and wait for it at most `limit_s`; False when it did not
    finish in time (the thread is left to Ray; the interpreter does not wait for it at exit)."""
    import threading

    done = threading.Event()

    def run() -> None:
        try:
            call()
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    return done.wait(limit_s)


def cancel(ray, refs, limit_s: float = CANCEL_LIMIT_S) -> bool:
    """Ask Ray to stop the tasks `refs` (force: their worker processes are killed) within `limit_s`; False
    when Ray did not take them in time (a local cluster's workers go with `disconnect` all the same)."""
    def cancel_all() -> None:
        for ref in refs:
            ray.cancel(ref, force=True)

    return within(cancel_all, limit_s, "ray-cancel")


def disconnect(ray, limit_s: float = SHUTDOWN_LIMIT_S) -> bool:
    """Shut Ray down (and the local cluster this process started) within `limit_s`; False when it did not
    finish in time. Ray's exit hook is removed either way, so the interpreter never waits on it again: a
    loaded machine once kept an interrupted driver from exiting for more than five minutes."""
    import atexit

    finished = within(ray.shutdown, limit_s, "ray-shutdown")
    atexit.unregister(ray.shutdown)
    return finished
