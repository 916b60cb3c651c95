"""Executors: in process, and a real local Ray cluster (2 CPUs, loopback only, no
dashboard) whose results equal the in-process run's exactly: dataset profiles, toy sweeps,
checkpoint trajectories. Ray is an optional extra: without it these skip, except in CI
(CI=true), which installs it (`make test`)."""

from __future__ import annotations

import functools
import operator
import os

import pytest
import torch

from lens_possym.errors import InvalidSelectionError, LensPossymError, TrainingError
from lens_possym.execution import InProcess, RayExecutor, resolve_executor
from lens_possym.models import tiny_model
from lens_possym.scores.dataset import dataset_profile
from lens_possym.training.trajectories import checkpoint_scores
from lens_possym.papers.a.sweeps import frequency_sweep
from lens_possym.papers.a.tasks import IndexTask
from lens_possym.training.loop import TrainConfig, train
from lens_possym.training.toy import ToyTransformer, toy_config_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_in_process_maps_in_order_and_lazily():
    seen = []

    def items():
        for i in range(5):
            seen.append(i)
            yield i

    it = InProcess().imap(functools.partial(operator.mul, 3), items())
    assert next(it) == 0 and seen == [0]                        # nothing read ahead
    assert list(it) == [3, 6, 9, 12]
    assert isinstance(resolve_executor(None), InProcess)
    with pytest.raises(LensPossymError, match="unknown executor 'dask'"):
        resolve_executor("dask")
    with pytest.raises(LensPossymError, match="cpus_per_task"):
        RayExecutor(cpus_per_task=0)


def _ray():
    if os.environ.get("CI") == "true":
        import ray  # noqa: F401 - CI installs the extra: a missing Ray is a failure there
    return pytest.importorskip("ray")


def test_passing_a_ray_executor_starts_no_cluster_until_work_arrives():
    """isinstance against the runtime-checkable Executor protocol reads every member, and
    ``RayExecutor.workers`` starts the cluster: resolving (and refusing) must not."""
    ray = _ray()
    assert not ray.is_initialized()
    executor = RayExecutor()
    assert resolve_executor(executor) is executor
    with pytest.raises(InvalidSelectionError, match="pass the model's name"):
        dataset_profile(tiny_model("llama", n_layers=1), [[1, 2, 3]],
                        executor=executor)
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster():
    """One local 2-CPU cluster for the module, shut down afterwards."""
    ray = _ray()
    assert not ray.is_initialized()
    with RayExecutor(num_cpus=2) as executor:
        yield executor
    assert not ray.is_initialized()


def _fail(item):
    raise InvalidSelectionError(f"bad item {item}")


@pytest.mark.enable_socket  # Ray's driver talks to its own services over 127.0.0.1
def test_ray_cluster_is_local_loopback_and_maps_in_order(cluster):
    import psutil
    import ray

    assert cluster.workers == 2
    assert cluster.map(functools.partial(operator.pow, 2), range(7)) == [2**i for i in range(7)]
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    # every socket a Ray process listens on is on the loopback interface; no dashboard
    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    listening = [c for c in psutil.net_connections("inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in ours]
    assert listening and all(c.laddr.ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for c in listening), listening
    assert all(c.laddr.port != 8265 for c in listening)
    with pytest.raises(InvalidSelectionError, match="bad item 3"):  # raised as itself
        cluster.map(_fail, [3])


PROMPTS = [torch.randint(2, 120, (n,), generator=torch.Generator().manual_seed(n)).tolist()
           for n in (5, 9, 6, 9, 12, 5, 7, 8, 11, 6)]


@pytest.mark.enable_socket
def test_a_dataset_profile_on_ray_equals_the_in_process_one(cluster, tmp_path):
    here = dataset_profile("tiny-llama", PROMPTS, shard_size=3, layers=[0, 1])
    there = dataset_profile("tiny-llama", PROMPTS, shard_size=3, layers=[0, 1],
                            executor=cluster, out_dir=tmp_path)
    assert here.moments.keys() == there.moments.keys()
    for name, m in here.moments.items():
        for stat in ("count", "mean", "m2"):
            assert torch.equal(getattr(m, stat), getattr(there.moments[name], stat)), name
    assert len(list((tmp_path / "shards").glob("*.pt"))) == 4


TASK = IndexTask(n_symbols=5, length=5, seed=2)
QUICK = TrainConfig(steps=30, eval_every=15, eval_size=64, batch_size=32)


@pytest.mark.enable_socket
def test_a_toy_sweep_on_ray_equals_the_in_process_one(cluster):
    kw = dict(seeds=(0, 1), train_config=QUICK, model_kwargs={"n_freqs": 3}, score_prompts=8)
    here = frequency_sweep(TASK, [0, 2], **kw)
    there = frequency_sweep(TASK, [0, 2], executor=cluster, **kw)
    assert torch.equal(here.accuracy(), there.accuracy())
    assert [r.accuracy_history for r in here.runs] == [r.accuracy_history for r in there.runs]
    assert [(r.pos_score, r.sym_score, r.pos_freq) for r in here.runs] == [
        (r.pos_score, r.sym_score, r.pos_freq) for r in there.runs]
    with pytest.raises(TrainingError, match="callbacks_for runs callbacks in this process"):
        frequency_sweep(TASK, [0], executor=cluster, callbacks_for=lambda s, seed: [], **kw)


@pytest.mark.enable_socket
def test_checkpoint_scores_on_ray_equal_the_in_process_ones(cluster, tmp_path):
    model = ToyTransformer(toy_config_for(TASK, n_freqs=3))
    train(model, TASK, TrainConfig(steps=20, eval_every=10, eval_size=64, batch_size=32,
                                   checkpoint_every=10, out_dir=str(tmp_path)))
    here = checkpoint_scores(tmp_path, 8)
    there = checkpoint_scores(tmp_path, 8, executor=cluster)
    assert [c.step for c in here] == [10, 20]      # model.pt is step 20: listed once
    assert here == there
    with pytest.raises(TrainingError, match="no checkpoints"):
        checkpoint_scores(tmp_path / "nothing")
