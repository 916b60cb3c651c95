r"""Frequency sweeps: one toy model per frequency set and seed, trained and compared.

:func:`sweep` trains one toy model per frequency set (a single id, or a pair such as
``(θ=0 id, k)``) and seed, and gathers test accuracy overall and by answer position,
against frequency id and angle, plus the positional/symbolic scores of each trained head
(:func:`~lens_possym.training.trajectories.head_scores`). (Not to be confused with
:mod:`lens_possym.experiments.sweep`, which ablates frequency bands of a trained model.)

Every model is the same one-layer, one-head, one-hot toy (:func:`toy_config_for`) with the
standard angle schedule and a θ = 0 tail as the last id; the **gate** restricts the head to
the chosen ids, so all runs share architecture, initial weights (per seed), data stream and
optimiser, and differ only in the frequencies the head may use.

"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from ...plugins import boundary, write_text_atomically
from ...errors import TrainingError
from ...execution import Executor, resolve_executor
from ...results_io import ResultIO
from ...training.toy import ToyTransformer, toy_config_for
from ...training.tasks import Task, make_task
from ...training.trajectories import head_scores
from ...training.loop import TrainConfig, TrainResult, train

__all__ = [
    "FrequencySweepRun",
    "FrequencySweep",
    "frequency_sweep",
    # the old names, kept for now (docs/names.md)
    "SweepRun",
    "SweepResult",
    "sweep",
    "single_ids",
    "pairs_with",
]


@boundary
def single_ids(ids: Sequence[int]) -> list[tuple[int, ...]]:
    """``[(k,), ...]``: one run per single frequency id."""
    return [(int(k),) for k in ids]


@boundary
def pairs_with(fixed: int, ids: Sequence[int]) -> list[tuple[int, ...]]:
    """``[(fixed, k), ...]`` for ``k != fixed``: e.g. the θ = 0 id paired with each other id."""
    return [(int(fixed), int(k)) for k in ids if int(k) != int(fixed)]


@dataclass
class FrequencySweepRun:
    """One trained model of a sweep."""

    freq_ids: list[int]
    angles: list[float]
    seed: int
    test_accuracy: float
    accuracy_by_position: list[float]
    steps_run: int
    train_time_s: float
    reached_target_at: int | None = None
    pos_score: float | None = None
    sym_score: float | None = None
    pos_freq: list[float] | None = None
    sym_freq: list[float] | None = None
    score_method: str | None = None
    accuracy_history: list[list[float]] = field(default_factory=list)  # [[step, acc], ...]

    @property
    def label(self) -> str:
        return "+".join(str(f) for f in self.freq_ids)


@dataclass(repr=False)
class FrequencySweep(ResultIO):
    """All runs of a :func:`sweep`, with tables and arrays over frequency sets × seeds.

    Attributes:
        task, task_config: the task.
        model_config, train_config: shared settings (per-run seeds differ).
        angles: angle of every frequency id of the model (the θ = 0 tail last).
        answer_positions: positions of ``accuracy_by_position``.
        runs: one :class:`FrequencySweepRun` per (frequency set, seed), in sweep order.
    """

    task: str
    task_config: dict
    model_config: dict
    train_config: dict
    angles: list[float]
    answer_positions: list[int]
    runs: list[FrequencySweepRun]
    wall_time_s: float = 0.0

    FORMAT = "lens-possym/toy-sweep@1"
    UNTAGGED_OK = True  # sweep.json files written before the tag

    @property
    def freq_sets(self) -> list[tuple[int, ...]]:
        return list(dict.fromkeys(tuple(r.freq_ids) for r in self.runs))

    @property
    def seeds(self) -> list[int]:
        return list(dict.fromkeys(r.seed for r in self.runs))

    def _grid(self, value: Callable[[FrequencySweepRun], Any]) -> Tensor:
        sets, seeds = self.freq_sets, self.seeds
        index = {(tuple(r.freq_ids), r.seed): r for r in self.runs}
        rows = []
        for s in sets:
            row = []
            for seed in seeds:
                run = index.get((s, seed))
                v = value(run) if run is not None else None
                row.append(v if v is not None else float("nan"))
            rows.append(row)
        return torch.tensor(rows, dtype=torch.float64)

    def accuracy(self) -> Float[Tensor, "freq_set seed"]:
        """Test accuracy ``[n_sets, n_seeds]``."""
        return self._grid(lambda r: r.test_accuracy)

    def accuracy_by_position(self) -> Float[Tensor, "freq_set seed answer_pos"]:
        sets, seeds = self.freq_sets, self.seeds
        out = torch.full((len(sets), len(seeds), len(self.answer_positions)), float("nan"),
                         dtype=torch.float64)
        for r in self.runs:
            out[sets.index(tuple(r.freq_ids)), seeds.index(r.seed)] = torch.tensor(
                [float("nan") if a is None else a for a in r.accuracy_by_position])
        return out

    def edge_minus_middle(self) -> Float[Tensor, "freq_set seed"]:
        """Accuracy at the prompt's edges minus in its middle, per run.

        Edges: the first and last quarter of the answer positions (at least one each);
        middle: the rest. Positive: U-shaped (ends easier); negative: inverse U.
        """
        by_pos = self.accuracy_by_position()
        n = by_pos.shape[-1]
        k = max(1, n // 4)
        edges = torch.cat([by_pos[..., :k], by_pos[..., n - k:]], dim=-1).nanmean(-1)
        middle = by_pos[..., k: n - k].nanmean(-1)
        return edges - middle

    def scores(self) -> tuple[Tensor, Tensor]:
        """``(s_POS, s_SYM)`` of the trained heads, each ``[n_sets, n_seeds]``."""
        return self._grid(lambda r: r.pos_score), self._grid(lambda r: r.sym_score)

    def set_angles(self, freq_set: Sequence[int]) -> list[float]:
        return [self.angles[f] for f in freq_set]

    def table(self) -> str:
        """A Markdown table: one row per frequency set, accuracy per seed and mean."""
        seeds = self.seeds
        acc = self.accuracy()
        pos, sym = self.scores()
        has_scores = bool(torch.isfinite(pos).any())
        shape = self.edge_minus_middle()
        head = ["ids", "θ (rad/token)"] + [f"acc seed {s}" for s in seeds] + ["mean acc",
                                                                               "edges − middle"]
        if has_scores:
            head += ["s_POS", "s_SYM"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row, s in enumerate(self.freq_sets):
            angles = ", ".join(_fmt_angle(a) for a in self.set_angles(s))
            cells = ["+".join(map(str, s)), angles]
            cells += [f"{float(a):.3f}" for a in acc[row]]
            cells.append(f"{float(acc[row].nanmean()):.3f}")
            cells.append(f"{float(shape[row].nanmean()):+.2f}")
            if has_scores:
                cells += [f"{float(pos[row].nanmean()):.2f}", f"{float(sym[row].nanmean()):.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "FrequencySweep":
        data = {k: v for k, v in data.items() if k != "format"}
        runs = []
        for r in data.pop("runs"):
            r = dict(r)
            r["accuracy_by_position"] = [float("nan") if a is None else a
                                         for a in r["accuracy_by_position"]]
            runs.append(FrequencySweepRun(**r))
        return cls(runs=runs, **data)

    def _table(self):
        """Long format: one row per (run, number). ``frequency`` is the run's frequency set
        (``"3"`` or ``"3+16"``), ``angle`` its first id's angle, ``seed`` the run's seed;
        ``score`` is ``test_accuracy``, ``pos``, ``sym``, ``pos_freq``/``sym_freq`` (with
        ``freq_id`` the id scored) or ``accuracy_at`` (with ``answer_pos``)."""
        import pandas as pd

        rows = []
        for r in self.runs:
            base = {"frequency": "+".join(map(str, r.freq_ids)),
                    "angle": self.angles[r.freq_ids[0]] if r.freq_ids else float("nan"),
                    "seed": r.seed}
            rows.append({**base, "score": "test_accuracy", "value": r.test_accuracy})
            for name, value in (("pos", r.pos_score), ("sym", r.sym_score)):
                if value is not None:
                    rows.append({**base, "score": name, "value": value})
            for name, values in (("pos_freq", r.pos_freq), ("sym_freq", r.sym_freq)):
                for fid, value in enumerate(values or []):
                    rows.append({**base, "score": name, "freq_id": fid, "value": value})
            for p, value in zip(self.answer_positions, r.accuracy_by_position):
                rows.append({**base, "score": "accuracy_at", "answer_pos": p, "value": value})
        frame = pd.DataFrame.from_records(rows)
        for column in ("freq_id", "answer_pos"):
            if column in frame:
                frame[column] = frame[column].astype("Int64")
        return frame

    def summary(self) -> dict:
        """The task, the frequency sets and seeds, and each set's mean test accuracy over
        seeds (``"3+16"`` names a set)."""
        acc = self.accuracy()
        return {"task": self.task, "n_runs": len(self.runs), "seeds": list(self.seeds),
                "accuracy": {"+".join(map(str, ids)): float(acc[i].nanmean())
                             for i, ids in enumerate(self.freq_sets)},
                "wall_time_s": self.wall_time_s}

    def _headline(self) -> list[str]:
        acc = self.accuracy()
        best = int(acc.nanmean(-1).nan_to_num(-1).argmax()) if acc.numel() else None
        out = [f"task={self.task!r}", f"freq_sets={len(self.freq_sets)}",
               f"seeds={self.seeds}"]
        if best is not None:
            out.append(f"best={'+'.join(map(str, self.freq_sets[best]))} "
                       f"acc {float(acc[best].nanmean()):.3f}")
        return out


@dataclass
class _SweepTask:
    """Train and score one (frequency set, seed) of a sweep: a picklable callable, so
    that an executor can run it in another process."""

    task: Task
    config: TrainConfig
    model_kwargs: dict
    probe: Tensor | None
    angles: list[float]
    out: str | None
    resume: bool
    callbacks_for: Callable[[tuple[int, ...], int], Sequence[Callable]] | None = None

    def __call__(self, item: tuple[tuple[int, ...], int]) -> FrequencySweepRun:
        s, seed = item
        config, task = self.config, self.task
        model = ToyTransformer(toy_config_for(task, seed=int(seed), **self.model_kwargs))
        model.set_frequencies(list(s))
        run_dir = Path(self.out) / "runs" / f"{'+'.join(map(str, s))}_seed{seed}" if self.out else None
        cfg = replace(config, seed=int(seed), out_dir=str(run_dir) if run_dir else None,
                      checkpoint_every=config.checkpoint_every if run_dir else None)
        callbacks = list(self.callbacks_for(s, seed)) if self.callbacks_for else []
        result: TrainResult = train(model, task, cfg, callbacks=callbacks, resume=self.resume)
        run = FrequencySweepRun(
            freq_ids=list(s), angles=[self.angles[f] for f in s], seed=int(seed),
            test_accuracy=result.test_accuracy,
            accuracy_by_position=result.test_accuracy_by_position,
            steps_run=result.steps_run, train_time_s=result.train_time_s,
            reached_target_at=result.reached_target_at,
            accuracy_history=[[h.step, h.test_accuracy] for h in result.history],
        )
        if self.probe is not None:
            hs = head_scores(model, self.probe)
            run.pos_score, run.sym_score = hs.pos, hs.sym
            run.pos_freq, run.sym_freq, run.score_method = hs.pos_freq, hs.sym_freq, hs.method
        return run


def _fmt_angle(theta: float) -> str:
    if theta == 0:
        return "0"
    return f"{theta:.3g}"


def frequency_sweep(
    task: Task | str,
    freq_sets: Sequence[Sequence[int] | int] | None = None,
    *,
    seeds: Sequence[int] = (0,),
    train_config: TrainConfig | None = None,
    model_kwargs: dict | None = None,
    scores: bool = True,
    score_prompts: int = 64,
    out_dir: str | Path | None = None,
    callbacks_for: Callable[[tuple[int, ...], int], Sequence[Callable]] | None = None,
    log: Callable[[str], None] | None = None,
    resume: bool = False,
    executor: "Executor | str | None" = None,
) -> FrequencySweep:
    """Train one toy model per frequency set and seed on ``task``; gather accuracies and scores.

    Args:
        task: a canonical task or its name (default settings).
        freq_sets: frequency ids the head may use in each run: ints for single ids, tuples
            for sets (e.g. ``pairs_with(16, range(16))``); default every single id.
        seeds: one run per seed per set (the seed sets both the weights and the data).
        train_config: shared training settings (its ``seed`` and ``out_dir`` are replaced
            per run).
        model_kwargs: passed to :func:`~lens_possym.training.toy.toy_config_for`
            (``n_freqs``, ``rope_base``, ``nope_dims``, ``attn_scale``, ...).
        scores: also compute the trained head's positional/symbolic scores on
            ``score_prompts`` test prompts (:func:`head_scores`).
        out_dir: if set, each run writes ``runs/<ids>_seed<s>/{model.pt,metrics.json}`` and
            the sweep ``sweep.json`` and ``table.md``.
        callbacks_for: ``fn(freq_set, seed) -> callbacks`` passed to :func:`train`
            (e.g. a :class:`QKTrajectory` for chosen runs).
        log: one line per finished run (e.g. ``print``).
        resume: with ``out_dir``, continue each run from its folder's latest checkpoint
            (finished runs are read back, not trained again; see :func:`train`).
        executor: where the runs train (:class:`~lens_possym.execution.InProcess` by
            default, one after another; a :class:`~lens_possym.execution.RayExecutor` or
            ``"ray"`` trains them in parallel on a Ray cluster, with the same results).

    Returns:
        :class:`FrequencySweep`.
    """
    if isinstance(task, str):
        task = make_task(task)
    config = train_config or TrainConfig()
    model_kwargs = dict(model_kwargs or {})
    base = toy_config_for(task, **model_kwargs)
    n_freqs = base.n_freqs
    if freq_sets is None:
        freq_sets = single_ids(range(n_freqs))
    sets = [tuple(int(f) for f in ([s] if isinstance(s, int) else s)) for s in freq_sets]
    bad = [s for s in sets if not s or any(not 0 <= f < n_freqs for f in s)]
    if bad:
        raise TrainingError(
            f"frequency sets {bad} out of range: the sweep's model has ids 0..{n_freqs - 1} "
            f"({n_freqs - 1} is the θ=0 tail)" if base.has_tail else
            f"frequency sets {bad} out of range: ids 0..{n_freqs - 1}")
    if not seeds:
        raise TrainingError("seeds is empty: give at least one seed")
    if resume and not out_dir:
        raise TrainingError("resume=True needs out_dir (the sweep folder to resume)")
    runner = resolve_executor(executor)
    if callbacks_for is not None and getattr(runner, "remote", False):
        raise TrainingError(
            f"callbacks_for runs callbacks in this process; {runner!r} trains elsewhere, where "
            "their records would be lost: use the in-process executor for callbacks")
    out = Path(out_dir) if out_dir else None
    probe = task.test_set(score_prompts).tokens if scores else None
    angles = ToyTransformer(base).angles.tolist()
    one = _SweepTask(task, config, model_kwargs, probe, angles, str(out) if out else None,
                     resume, callbacks_for)
    start = time.perf_counter()
    runs: list[FrequencySweepRun] = []
    for run in runner.imap(one, [(s, int(seed)) for s in sets for seed in seeds]):
        runs.append(run)
        if log:
            extra = (f"  s_POS {run.pos_score:.2f} s_SYM {run.sym_score:.2f}"
                     if run.pos_score is not None else "")
            log(f"{task.name} ids {run.label:>6} seed {run.seed}: test acc "
                f"{run.test_accuracy:.3f} ({run.steps_run} steps, "
                f"{run.train_time_s:.1f}s){extra}")
    result = FrequencySweep(
        task=task.name, task_config=task.config(), model_config=base.to_dict(),
        train_config=asdict(config), angles=angles, answer_positions=task.answer_positions,
        runs=runs, wall_time_s=time.perf_counter() - start,
    )
    if out:
        result.save(out / "sweep.json")

        write_text_atomically(out / "table.md", result.table() + "\n")
    return result


#: the old names (docs/names.md): a *frequency* sweep trains models; a *band* sweep
#: (:func:`lens_possym.interventions.band_sweep`) ablates a trained one
sweep = frequency_sweep
SweepResult = FrequencySweep
SweepRun = FrequencySweepRun
