"""Where the work that fans out runs: in this process (the default) or on a Ray cluster.

Toy-model frequency sweeps (:func:`lens_possym.papers.a.sweeps.frequency_sweep`), checkpoint
trajectories (:func:`lens_possym.training.trajectories.checkpoint_scores`) and dataset profiles
(:func:`lens_possym.scores.dataset_profile`, one task per shard of prompts) are lists of
independent tasks. They take an ``executor=``:

* :class:`InProcess` (the default): one task after another, here;
* :class:`RayExecutor`: one Ray task per item, on the workers (and GPUs) of a Ray cluster:
  a local one it starts (``RayExecutor(num_cpus=2)``: loopback only, no dashboard) or an
  existing one (``RayExecutor(address="ray://head:10001")`` or ``"auto"``). Ray is the
  optional extra ``pip install 'lens-possym[ray]'``.

Both return the results in the order of the items, and the same results: every task
runs with the driver's torch thread count (``threads``), so the arithmetic is the same
wherever it runs (the tests hold Ray to the in-process run exactly).
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar, runtime_checkable

from .errors import ClusterError, LensPossymError

__all__ = ["Executor", "InProcess", "RayExecutor", "resolve_executor"]

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Executor(Protocol):
    """Runs ``fn`` on each item; results come back in the order of the items.

    ``imap`` consumes ``items`` lazily and keeps at most ``max_in_flight`` tasks pending
    (bounded memory over a long stream); ``map`` is ``list(imap(...))``. ``fn`` and the
    items must pickle for executors that run elsewhere (a module-level function or a
    ``functools.partial`` of one; no open files or models: pass a loader, e.g. a model
    name, instead).
    """

    workers: int

    def imap(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]: ...

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]: ...


class InProcess:
    """Every task here, one after another (the default executor)."""

    workers = 1
    remote = False

    def imap(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        for item in items:
            yield fn(item)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        return list(self.imap(fn, items))

    def __repr__(self) -> str:
        return "InProcess()"


def _run_with_threads(fn: Callable[[Any], Any], item: Any, threads: int | None) -> Any:
    """A task on a worker: the driver's torch thread count, then ``fn(item)``."""
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    return fn(item)


class RayExecutor:
    """Each task as a Ray task, on a local cluster it starts or on an existing one.

    Args:
        address: ``None``: start a local cluster of ``num_cpus`` CPUs in this process
            (loopback only: every Ray service listens on 127.0.0.1; no dashboard; worker
            logs stay in Ray's log files); ``"auto"``: the cluster this machine belongs to
            (``ray start --head`` ran here); ``"ray://host:10001"``: a remote cluster
            through Ray Client. If Ray is already initialised, that cluster is used.
        num_cpus, num_gpus: the local cluster's resources (``address=None`` only).
        cpus_per_task, gpus_per_task: what each task asks of the scheduler (a fraction of
            a GPU lets several tasks share one).
        max_in_flight: most tasks pending at once in :meth:`imap` (default twice the
            cluster's CPUs divided by ``cpus_per_task``).
        threads: torch threads in each task (default: the driver's
            ``torch.get_num_threads()``, so results equal the in-process run's).
        init_kwargs: more arguments for ``ray.init``.

    Use it as a context manager (or call :meth:`shutdown`) to stop a cluster it started.
    """

    remote = True

    def __init__(self, address: str | None = None, *, num_cpus: int | None = 2,
                 num_gpus: int | None = None, cpus_per_task: float = 1.0,
                 gpus_per_task: float = 0.0, max_in_flight: int | None = None,
                 threads: int | None = None, init_kwargs: dict | None = None) -> None:
        if cpus_per_task <= 0 or gpus_per_task < 0:
            raise LensPossymError(
                f"cpus_per_task must be > 0 and gpus_per_task >= 0, got {cpus_per_task} and "
                f"{gpus_per_task}")
        if max_in_flight is not None and max_in_flight < 1:
            raise LensPossymError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.address, self.num_cpus, self.num_gpus = address, num_cpus, num_gpus
        self.cpus_per_task, self.gpus_per_task = cpus_per_task, gpus_per_task
        self.max_in_flight, self.threads = max_in_flight, threads
        self.init_kwargs = dict(init_kwargs or {})
        self._started = False
        self._remote = None

    # ---- the cluster ---------------------------------------------------------------------

    @staticmethod
    def _ray():
        try:
            import ray
        except ImportError as exc:
            raise LensPossymError(
                "RayExecutor needs Ray: pip install 'lens-possym[ray]' (or use the default "
                "in-process executor)") from exc
        return ray

    def start(self) -> "RayExecutor":
        """Connect to (or start) the cluster; called by the first task if not before."""
        ray = self._ray()
        if ray.is_initialized():
            return self
        kwargs = {"log_to_driver": False, "configure_logging": False} | self.init_kwargs
        try:
            if self.address is None:
                _init_local(ray, num_cpus=self.num_cpus, num_gpus=self.num_gpus, **kwargs)
            else:
                ray.init(address=self.address, **kwargs)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - Ray ends with SystemExit too
            where = self.address or "a local cluster"
            raise ClusterError(
                f"cannot start Ray at {where}: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}; check the address (e.g. "
                "'ray://host:10001', 'auto' for a cluster started with 'ray start'), or run "
                "without --ray") from None
        self._started = True
        return self

    def shutdown(self) -> None:
        """Stop the cluster if this executor started it (connected ones are left running)."""
        if self._started:
            self._ray().shutdown()
            self._started = False
            self._remote = None

    def __enter__(self) -> "RayExecutor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    @property
    def workers(self) -> int:
        """Tasks that can run at once (the cluster's CPUs over ``cpus_per_task``)."""
        ray = self.start()._ray()
        cpus = ray.cluster_resources().get("CPU", 1)
        return max(1, int(cpus // self.cpus_per_task))

    # ---- tasks ---------------------------------------------------------------------------

    def imap(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        ray = self.start()._ray()
        if self._remote is None:
            self._remote = ray.remote(_run_with_threads).options(
                num_cpus=self.cpus_per_task, num_gpus=self.gpus_per_task, max_retries=0)
        import torch

        threads = self.threads or torch.get_num_threads()
        window = self.max_in_flight or 2 * self.workers
        fn_ref = ray.put(fn)                     # shipped once, not once per task
        pending: deque = deque()
        for item in items:
            pending.append(self._remote.remote(fn_ref, item, threads))
            if len(pending) >= window:
                yield _get(ray, pending.popleft())
        while pending:
            yield _get(ray, pending.popleft())

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        return list(self.imap(fn, items))

    def __repr__(self) -> str:
        where = self.address or f"local, {self.num_cpus} CPUs"
        return f"RayExecutor({where})"


def _get(ray, ref):
    """A task's result; a lens-possym error raised in the task is raised here as itself."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, LensPossymError):
            raise _as_raised(cause) from None
        raise


def _as_raised(cause: LensPossymError) -> LensPossymError:
    """The task's own error, as the driver raises it."""
    return cause


def _init_local(ray, **kwargs) -> None:
    """``ray.init`` of a one-machine cluster that listens on loopback only, no dashboard.

    Ray replaces a node address of 127.0.0.1 by the machine's routable one (so that other
    nodes can join) unless it believes clusters are off, as on macOS and Windows; that
    switch (``ray_constants.ENABLE_RAY_CLUSTER``) is turned off around the local start,
    so the GCS, the raylet, the object manager, the runtime-env agent and the workers all
    bind 127.0.0.1.
    """
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1", **kwargs)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def resolve_executor(executor: Executor | str | None) -> Executor:
    """``None`` or ``"inprocess"``: :class:`InProcess`; ``"ray"``: a local
    :class:`RayExecutor`; an executor: itself."""
    if executor is None or executor == "inprocess":
        return InProcess()
    if executor == "ray":
        return RayExecutor(address=os.environ.get("LENS_POSSYM_RAY_ADDRESS") or None)
    # the known executors first: a runtime-checkable Protocol's isinstance reads every
    # member, and RayExecutor.workers is a property that starts the cluster
    if isinstance(executor, (InProcess, RayExecutor)) or isinstance(executor, Executor):
        return executor
    raise LensPossymError(
        f"unknown executor {executor!r}; use InProcess(), RayExecutor(...), 'inprocess' or 'ray'")
