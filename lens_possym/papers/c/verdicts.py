r"""Paper C's claims judged by rules fixed before the runs (docs/paper_c_rules.md).

:data:`RULES` holds the 16 rules as written there (claim, the paper's number, the rule,
word for word; a test checks each rule's text against the page). :func:`judge_seed`
applies every rule to the analyses of one ``(preset, seed)`` (a :class:`RunAnalyses` per
task, each field ``None`` until its analysis has run), giving one :class:`RuleResult`
per row: ``holds`` is ``True``/``False``, or ``None`` when an analysis it needs is
missing (never guessed). :func:`verdict` combines the seeds: a claim **holds** for a
preset when its rule holds in at least two of the three seeds, **does not hold** when it
fails in at least two, and is **pending** otherwise (a seed not yet run, or not yet
analysed). Rules 11 and 12 read the constructions and have no seed (:func:`judge_theory`).

Rules 6 and 10 name no task; they are applied to each task (rows ``"6 number"``,
``"6 letter"``, ``"10 number"``, ``"10 letter"``), each with its own verdict.

Readings where the rules leave a choice (stated once here and printed by the report):

* a hop count whose accuracy never reaches 0.5 has ``m_h = ∞``; a relative spread with
  ``max m_h = ∞`` and a finite ``min`` is 1 (its limit), with every ``m_h = ∞`` undefined
  (the rule fails);
* "decodes the answer" (rules 9, 10): the logit lens's argmax is the answer on at least
  half of the 4-hop prompts (the mid-point, as for ``m_h``); layer indices count blocks
  applied (:mod:`lens_possym.papers.c.chain`): "by layer ``ℓ+1``" at stop ``p_{h-1-ℓ}``
  is ``j <= h - k``, "before the last layer" is ``j < n_layers``;
* rule 10's "for at least 3 of the 4 stops" applies to both the logit lens and the
  residual patching.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor

from ...errors import InvalidSelectionError
from ...plugins import tensor_from_json, to_jsonable
from ...results_io import ResultIO

__all__ = ["Rule", "RULES", "RunAnalyses", "RuleResult", "mid_rise", "relative_spread",
           "convergence_step", "judge_seed", "judge_seed_strict", "STRICT_RULES", "judge_theory",
           "verdict", "ROW_KEYS", "STRICT_KEYS", "analyses_to_dict", "analyses_from_dict",
           "nan_list", "GAMMA", "LENGTHS_13"]

GAMMA = 0.1
LENGTHS_13 = (50, 100, 300, 850)
INF = math.inf


@dataclass(frozen=True)
class Rule:
    number: int
    claim: str
    paper: str
    rule: str


RULES: tuple[Rule, ...] = (
    Rule(1, "Number learns one hop count after another",
         "Fig 2A: hop 1 at ~2.2-2.5k, hop 2 ~3k, hops 3-4 ~4.5k",
         "`m_1 <= m_2 <= m_3 <= m_4` and Number's relative spread `>= 0.15`"),
    Rule(2, "Letter learns all hop counts together", "all rise together, 1.0 at ~2.8k",
         "Letter's relative spread `< 0.15` and smaller than Number's in the same seed"),
    Rule(3, "Letter converges before Number", "max accuracy at ~3,400 vs ~4,800",
         "`T_letter < T_number` (a task that never reaches 0.99 has `T` = infinity)"),
    Rule(4, "Number: pure positional heads in L0-L3, pure symbolic heads in L4-L11",
         "4 + 8, Fig 2C",
         "at the end: `>= 2` pure positional heads, all in L0-L3, and `>= 6` pure symbolic "
         "heads, all in L4-L11"),
    Rule(5, "Letter: 11 pure symbolic heads (L1-L11), no positional head", "11 + 0",
         "at the end: no pure positional head and `>= 9` pure symbolic heads"),
    Rule(6, "Pure heads emerge as accuracy converges; when it converges all heads are pure",
         "all heads pure at convergence",
         "`>= 9` of 12 heads pure at the checkpoint `T` (or the last one if `T` is infinity), "
         "and every head pure at the end is stably pure from a step `<= T + 500`"),
    Rule(7, "Letter L9-L11: s_SYM dips while s_POS ~ 1, then flips to symbolic",
         "Fig 6, ~2.5-2.8k",
         "for at least 2 of L9, L10, L11: some checkpoint with `s_SYM <= 0.3` and "
         "`s_POS >= 0.7` comes before the step from which the head is stably pure symbolic, "
         "and the head is pure symbolic at the end"),
    Rule(8, "Number solves the task by one Index hop per layer in L0-L3",
         "Fig 3A: stop `p_k` copies its next stop at layer `h-1-k`",
         "on 4-hop test prompts, hop share (attention from `p_k` on `p_{k+1}`) at layer "
         "`3-k` is `>= 0.5` for at least 3 of the 4 stops `k`"),
    Rule(9, "Letter solves the task by symbolic Retrieval, not Index", "Fig 3B",
         "no head labelled Index, and the attention-role labels of L1-L3 include Retrieval "
         "or the logit lens decodes the answer at stop `p_k` (`k < h`) before the last "
         "layer, on at least 3 of the 4 stops of 4-hop prompts"),
    Rule(10, "The answer is carried along the chain",
         "the decomposition `Reflexive^(l-h) o Index^h`",
         "the logit lens per (stop, layer) decodes the answer at stop `p_{h-1-l}` by layer "
         "`l + 1` for at least 3 of the 4 stops of 4-hop prompts, and residual-stream "
         "patching at stop `p_k` restores `>= 0.8` of prompts at some layer `<= h - k`"),
    Rule(11, "T_Index / T_Retrieval solve one hop exactly", "Thm 3.1",
         "accuracy `>= 0.99` at length 17 (constructions; no seed)"),
    Rule(12, "Delta_Index(n) <= min{1 - cos theta, 2 pi^2 / n^2}", "Thm 3.2, theta = 0.8",
         "over the task's own offsets (9..16), the max over inputs (Def 3.1) is within the "
         "bound at `>= 99 %` of lengths 17..1000; reported beside all offsets and beside "
         "Lemma F.1's min (no seed)"),
    Rule(13, "Letter generalises better than Number", "Fig 5B",
         "Letter `>=` Number at every length in {50, 100, 300, 850}, headline filler "
         "reading"),
    Rule(14, "Letter > 90 % at length 850", "> 0.90 up to 850",
         "Letter accuracy `>= 0.90` at 850, headline filler reading (the report also gives "
         "every reading)"),
    Rule(15, "Number barely generalises", "~0.83 at 50, ~0.47 at 300",
         "Number accuracy at 300 `<= 0.6`"),
    Rule(16, "Trained heads' discrepancy shrinks with length faster for Number's positional "
             "heads than for Letter's symbolic heads", "Thm 3.2, Remark 3.2",
         "mean over Number L0-L3 of `min gap(300) / min gap(17)` (Lemma F.1's min over 64 "
         "inputs) `<` the same for Letter L1-L3; Def 3.1's max reported beside it"),
)

#: the rows of the verdict table, in order (rules 6 and 10 once per task)
ROW_KEYS: tuple[str, ...] = ("1", "2", "3", "4", "5", "6 number", "6 letter", "7", "8", "9",
                             "10 number", "10 letter", "11", "12", "13", "14", "15", "16")


def rule(key: str) -> Rule:
    return RULES[int(key.split()[0]) - 1]


@dataclass
class RunAnalyses:
    """What the rules read from one run; ``None`` where the analysis has not run.

    Attributes:
        task, preset, seed: the run.
        history: ``[(step, test accuracy)]``, the training loop's evaluations (2,048 test
            prompts every 100 steps).
        steps, accuracy_by_hops: the checkpoints and each one's accuracy per hop count on
            the same 2,048 test prompts.
        pos, sym: ``[n_ckpt, n_layers, n_heads]`` scores at every checkpoint.
        labels: attention-role labels ``[n_layers][n_heads]`` at the end.
        hop_by_stop: ``[n_layers, n_heads, max_hops (h-1), max_hops (k)]`` at the end.
        lens_decoded, patch_restore: ``[max_hops, n_layers + 1, max_hops + 1]``.
        lengths: ``{length: accuracy}``, headline filler reading.
        gap_min, gap_max: ``{length: [n_layers, n_heads]}`` top-2 gaps (64 inputs).
    """

    task: str
    preset: str
    seed: int
    history: list[tuple[int, float]] | None = None
    steps: list[int] | None = None
    accuracy_by_hops: list[list[float]] | None = None
    pos: Tensor | None = None
    sym: Tensor | None = None
    labels: list[list[str]] | None = None
    hop_by_stop: Tensor | None = None
    lens_decoded: Tensor | None = None
    patch_restore: Tensor | None = None
    lengths: dict[int, float] | None = None
    gap_min: dict[int, Tensor] | None = None
    gap_max: dict[int, Tensor] | None = None


@dataclass(repr=False)
class RuleResult(ResultIO):
    """One rule on one seed: ``holds`` (``None``: an analysis is missing) and what was
    measured (``ours``)."""

    key: str
    holds: bool | None
    ours: str
    values: dict = field(default_factory=dict)

    FORMAT = "lens-possym/paper-c-rule@1"

    def summary(self) -> dict:
        return {"key": self.key, "holds": self.holds, "ours": self.ours}

    def _table(self):
        """One row: ``key``, ``holds``, ``ours``."""
        import pandas as pd

        return pd.DataFrame([self.summary()])


# ---- definitions ----------------------------------------------------------------------------

def mid_rise(steps: Sequence[int], values: Sequence[float], level: float = 0.5) -> float:
    """The first step whose value is ``>= level`` (``inf``: never)."""
    for s, v in zip(steps, values):
        if v is not None and v == v and v >= level:
            return float(s)
    return INF


def convergence_step(history: Sequence[tuple[int, float]], level: float = 0.99) -> float:
    """``T``: the first evaluation with overall test accuracy ``>= level`` (``inf``: never)."""
    return mid_rise([s for s, _ in history], [a for _, a in history], level)


def relative_spread(m: Sequence[float]) -> float:
    """``(max m - min m) / max m``; 1 when only the max is infinite, ``nan`` when all are."""
    hi, lo = max(m), min(m)
    if math.isinf(lo):
        return float("nan")
    if math.isinf(hi):
        return 1.0
    return (hi - lo) / hi if hi > 0 else 0.0


def _fmt_step(s: float) -> str:
    return "∞" if math.isinf(s) else f"{int(s)}"


def _missing(key: str, what: str) -> RuleResult:
    return RuleResult(key, None, f"missing: {what}")


def _pure_state(pos: Tensor, sym: Tensor, gamma: float = GAMMA) -> Tensor:
    """``[n_ckpt, n_layers, n_heads]``: 1 pure positional, -1 pure symbolic, 0 neither."""
    positional = (pos >= 1 - gamma) & (sym <= gamma)
    symbolic = (sym >= 1 - gamma) & (pos <= gamma)
    return positional.long() - symbolic.long()


def _stable_from(col: Tensor, steps: Sequence[int], kind: int) -> float:
    """The step from which ``col`` (one head over checkpoints) is ``kind`` to the end
    (``inf``: not ``kind`` at the end)."""
    if int(col[-1]) != kind:
        return INF
    i = len(col) - 1
    while i > 0 and int(col[i - 1]) == kind:
        i -= 1
    return float(steps[i])


def _m_h(run: RunAnalyses) -> list[float] | None:
    if run.steps is None or run.accuracy_by_hops is None:
        return None
    per_hop = list(zip(*run.accuracy_by_hops))
    return [mid_rise(run.steps, vals) for vals in per_hop]


# ---- the rules -------------------------------------------------------------------------------

def _rule_1(num: RunAnalyses) -> RuleResult:
    m = _m_h(num)
    if m is None:
        return _missing("1", "Number's accuracy per hop count at every checkpoint")
    ordered = all(a <= b for a, b in zip(m, m[1:]))
    spread = relative_spread(m)
    holds = ordered and spread == spread and spread >= 0.15
    return RuleResult("1", holds, f"m_h = {', '.join(map(_fmt_step, m))}; spread {spread:.2f}",
                      {"m": m, "spread": spread})


def _rule_2(num: RunAnalyses, let: RunAnalyses) -> RuleResult:
    ml, mn = _m_h(let), _m_h(num)
    if ml is None or mn is None:
        return _missing("2", "accuracy per hop count at every checkpoint (both tasks)")
    sl, sn = relative_spread(ml), relative_spread(mn)
    holds = sl == sl and sn == sn and sl < 0.15 and sl < sn
    return RuleResult("2", holds, f"Letter m_h = {', '.join(map(_fmt_step, ml))}; spread "
                      f"{sl:.2f} (Number's {sn:.2f})", {"m": ml, "spread": sl, "number": sn})


def _rule_3(num: RunAnalyses, let: RunAnalyses) -> RuleResult:
    if num.history is None or let.history is None:
        return _missing("3", "training history (both tasks)")
    tl, tn = convergence_step(let.history), convergence_step(num.history)
    return RuleResult("3", tl < tn, f"T = {_fmt_step(tl)} (Letter) vs {_fmt_step(tn)} (Number)",
                      {"letter": tl, "number": tn})


def _end_counts(run: RunAnalyses) -> tuple[int, list[int], int, list[int]] | None:
    """The pure heads at the last checkpoint: ``(n_positional, their layers, n_symbolic,
    their layers)``, or ``None`` without scores."""
    if run.pos is None or run.sym is None:
        return None
    state = _pure_state(run.pos, run.sym)[-1]
    pos_layers = sorted({int(i) for i in (state == 1).nonzero()[:, 0]})
    sym_layers = sorted({int(i) for i in (state == -1).nonzero()[:, 0]})
    return int((state == 1).sum()), pos_layers, int((state == -1).sum()), sym_layers


def _rule_4(num: RunAnalyses) -> RuleResult:
    c = _end_counts(num)
    if c is None:
        return _missing("4", "Number's scores at every checkpoint")
    n_p, p, n_s, s = c
    holds = n_p >= 2 and all(x <= 3 for x in p) and n_s >= 6 and all(x >= 4 for x in s)
    return RuleResult("4", holds, f"{n_p} positional (L{p}), {n_s} symbolic (L{s})",
                      {"positional": p, "symbolic": s})


def _rule_5(let: RunAnalyses) -> RuleResult:
    c = _end_counts(let)
    if c is None:
        return _missing("5", "Letter's scores at every checkpoint")
    n_p, p, n_s, s = c
    return RuleResult("5", n_p == 0 and n_s >= 9, f"{n_p} positional (L{p}), {n_s} symbolic "
                      f"(L{s})", {"positional": p, "symbolic": s})


def _rule_6(run: RunAnalyses) -> RuleResult:
    key = f"6 {run.task}"
    if run.pos is None or run.history is None or run.steps is None:
        return _missing(key, "scores at every checkpoint and the training history")
    T = convergence_step(run.history)
    state = _pure_state(run.pos, run.sym)
    steps = list(run.steps)
    if math.isinf(T):
        at = len(steps) - 1
    elif int(T) in steps:
        at = steps.index(int(T))
    else:
        return _missing(key, f"a checkpoint at T = {int(T)}")
    n_heads_total = state.shape[1] * state.shape[2]
    pure_at_T = int((state[at] != 0).sum())
    late = []
    for layer in range(state.shape[1]):
        for head in range(state.shape[2]):
            kind = int(state[-1, layer, head])
            if kind != 0:
                since = _stable_from(state[:, layer, head], steps, kind)
                if since > T + 500:
                    late.append((layer, since))
    holds = pure_at_T >= 9 and not late
    late_text = ", ".join(f"L{layer} from {_fmt_step(s)}" for layer, s in late) or "none"
    return RuleResult(key, holds, f"T = {_fmt_step(T)}: {pure_at_T} of {n_heads_total} pure "
                      f"then; settled after T + 500: {late_text}",
                      {"T": T, "pure_at_T": pure_at_T, "late": late})


def _rule_7(let: RunAnalyses) -> RuleResult:
    if let.pos is None or let.steps is None:
        return _missing("7", "Letter's scores at every checkpoint")
    state = _pure_state(let.pos, let.sym)
    n_layers = state.shape[1]
    hits, parts = 0, []
    for layer in (9, 10, 11):
        if layer >= n_layers:
            parts.append(f"L{layer}: none")
            continue
        col = state[:, layer, 0]
        since = _stable_from(col, let.steps, -1)
        dips = [s for i, s in enumerate(let.steps)
                if float(let.sym[i, layer, 0]) <= 0.3 and float(let.pos[i, layer, 0]) >= 0.7
                and s < since]
        ok = not math.isinf(since) and bool(dips)
        hits += ok
        parts.append(f"L{layer}: dip at {dips[0] if dips else '–'}, symbolic from "
                     f"{_fmt_step(since)}")
    return RuleResult("7", hits >= 2, "; ".join(parts), {"hits": hits})


def _rule_8(num: RunAnalyses) -> RuleResult:
    t = num.hop_by_stop
    if t is None:
        return _missing("8", "Number's attention roles")
    H = t.shape[2]
    if H < 4 or t.shape[0] < 4:
        return _missing("8", "4-hop prompts and 4 layers")
    shares = [float(t[3 - k, 0, 3, k]) for k in range(4)]
    n_ok = sum(s >= 0.5 for s in shares)
    return RuleResult("8", n_ok >= 3, "hop share at layer 3-k for k = 0..3: "
                      + ", ".join(f"{s:.2f}" for s in shares), {"shares": shares})


def _decodes(table: Tensor, h: int, k: int, level: float, upto: int) -> bool:
    col = table[h - 1, : upto + 1, k]
    return bool((col >= level).any())


def _rule_9(let: RunAnalyses) -> RuleResult:
    if let.labels is None:
        return _missing("9", "Letter's attention roles")
    flat = [x for row in let.labels for x in row]
    no_index = "Index" not in flat
    retrieval = any(x == "Retrieval" for row in let.labels[1:4] for x in row)
    lens_ok = None
    if let.lens_decoded is not None:
        n_layers = let.lens_decoded.shape[1] - 1
        lens_ok = sum(_decodes(let.lens_decoded, 4, k, 0.5, n_layers - 1) for k in range(4)) >= 3
    if not retrieval and lens_ok is None:
        return _missing("9", "Letter's logit lens")
    holds = no_index and (retrieval or bool(lens_ok))
    return RuleResult("9", holds, f"labels L0-L11: {[row[0] for row in let.labels]}; lens "
                      f"decodes p_k before the last layer on ≥3 of 4 stops: {lens_ok}",
                      {"no_index": no_index, "retrieval": retrieval, "lens": lens_ok})


def _rule_10(run: RunAnalyses) -> RuleResult:
    key = f"10 {run.task}"
    if run.lens_decoded is None or run.patch_restore is None:
        return _missing(key, "the logit lens and residual patching per stop")
    h = 4
    lens = [_decodes(run.lens_decoded, h, k, 0.5, h - k) for k in range(h)]
    patch = [_decodes(run.patch_restore, h, k, 0.8, h - k) for k in range(h)]

    def first(table, k, level):
        hit = (table[h - 1, :, k] >= level).nonzero()
        return int(hit[0]) if len(hit) else None

    lens_first = [first(run.lens_decoded, k, 0.5) for k in range(h)]
    patch_first = [first(run.patch_restore, k, 0.8) for k in range(h)]
    holds = sum(lens) >= 3 and sum(patch) >= 3
    show = lambda xs: ", ".join("–" if x is None else str(x) for x in xs)  # noqa: E731
    return RuleResult(key, holds, f"4-hop, k = 0..3 (schedule j ≤ 4, 3, 2, 1): lens first "
                      f"decodes at j = {show(lens_first)}; patching first restores ≥ 0.8 at "
                      f"j = {show(patch_first)}",
                      {"lens_first": lens_first, "patch_first": patch_first})


def _rule_13(num: RunAnalyses, let: RunAnalyses) -> RuleResult:
    if num.lengths is None or let.lengths is None:
        return _missing("13", "accuracy by length (both tasks)")
    missing = [n for n in LENGTHS_13 if n not in num.lengths or n not in let.lengths]
    if missing:
        return _missing("13", f"lengths {missing}")
    holds = all(let.lengths[n] >= num.lengths[n] for n in LENGTHS_13)
    return RuleResult("13", holds, "; ".join(f"{n}: L {let.lengths[n]:.2f} / N "
                                             f"{num.lengths[n]:.2f}" for n in LENGTHS_13))


def _rule_14(let: RunAnalyses) -> RuleResult:
    if let.lengths is None or 850 not in let.lengths:
        return _missing("14", "Letter's accuracy at 850")
    a = let.lengths[850]
    return RuleResult("14", a >= 0.90, f"{a:.3f}", {"accuracy": a})


def _rule_15(num: RunAnalyses) -> RuleResult:
    if num.lengths is None or 300 not in num.lengths:
        return _missing("15", "Number's accuracy at 300")
    a = num.lengths[300]
    extra = f" (at 50: {num.lengths[50]:.2f})" if 50 in num.lengths else ""
    return RuleResult("15", a <= 0.6, f"{a:.3f}{extra}", {"accuracy": a})


def _gap_ratio(run: RunAnalyses, layers: Sequence[int], which: str) -> float | None:
    table = run.gap_min if which == "min" else run.gap_max
    if table is None or 17 not in table or 300 not in table:
        return None
    if max(layers) >= table[17].shape[0]:
        return None
    vals = [float(table[300][layer, 0] / table[17][layer, 0]) for layer in layers]
    return sum(vals) / len(vals)


def _rule_16(num: RunAnalyses, let: RunAnalyses) -> RuleResult:
    rn, rl = _gap_ratio(num, range(4), "min"), _gap_ratio(let, range(1, 4), "min")
    if rn is None or rl is None:
        return _missing("16", "trained heads' gaps at 17 and 300 (both tasks)")
    xn, xl = _gap_ratio(num, range(4), "max"), _gap_ratio(let, range(1, 4), "max")
    return RuleResult("16", rn < rl, f"min gap(300)/min gap(17): Number L0-L3 {rn:.2f}, Letter "
                      f"L1-L3 {rl:.2f}; max: {xn:.2f} / {xl:.2f}",
                      {"number": rn, "letter": rl, "number_max": xn, "letter_max": xl})


def judge_seed(number: RunAnalyses | None, letter: RunAnalyses | None) -> dict[str, RuleResult]:
    """Every per-seed rule on one ``(preset, seed)``'s two runs (``None``: not run)."""
    num = number or RunAnalyses("number", "", -1)
    let = letter or RunAnalyses("letter", "", -1)
    for run, task in ((num, "number"), (let, "letter")):
        if run.task != task:
            raise InvalidSelectionError(f"expected a {task} run, got {run.task!r}")
    out = [_rule_1(num), _rule_2(num, let), _rule_3(num, let), _rule_4(num), _rule_5(let),
           _rule_6(num), _rule_6(let), _rule_7(let), _rule_8(num), _rule_9(let),
           _rule_10(num), _rule_10(let), _rule_13(num, let), _rule_14(let), _rule_15(num),
           _rule_16(num, let)]
    return {r.key: r for r in out}


# ---- the strict rules (docs/paper_c_rules.md, addendum of 2026-11-28) -------------------

#: the strict rules' text, as the addendum gives it (printed beside the lenient rule)
STRICT_RULES = {
    "4": "the counted positional heads are exactly L0-L3 and the counted symbolic heads "
         "exactly L4-L11 (4 + 8; counted cumulatively, as Fig 2C counts)",
    "5": "the counted symbolic heads are exactly L1-L11, no head is ever counted positional, "
         "and L0 is not pure at the end",
    "6": "at T every head of the paper's pure set (Number: all 12; Letter: L1-L11) is pure "
         "and stays pure from then on",
    "9": "no head labelled Index, and each of L0-L3 labelled Retrieval (4-hop prompts)",
    "16": "with Def 3.1's max: mean over Number L0-L3 of max gap(300) / max gap(17) < 1 "
          "and < the same mean over Letter L1-L11",
}


#: the rows of the strict table (claims 13-15's strict rules read the length cells)
STRICT_KEYS: tuple[str, ...] = ("4", "5", "6 number", "6 letter", "9", "16")


def _counted(run: RunAnalyses) -> tuple[list[int], list[int]] | None:
    """Layers whose head 0 is ever pure positional / ever pure symbolic (cumulative, as
    Fig 2C counts), or ``None`` without scores."""
    if run.pos is None or run.sym is None:
        return None
    state = _pure_state(run.pos, run.sym)[:, :, 0]
    pos = sorted(int(i) for i in (state == 1).any(dim=0).nonzero().flatten())
    sym = sorted(int(i) for i in (state == -1).any(dim=0).nonzero().flatten())
    return pos, sym


def _strict_4(num: RunAnalyses) -> RuleResult:
    c = _counted(num)
    if c is None:
        return _missing("4", "Number's scores at every checkpoint")
    pos, sym = c
    holds = pos == [0, 1, 2, 3] and sym == list(range(4, num.pos.shape[1]))
    return RuleResult("4", holds, f"counted positional L{pos}, symbolic L{sym}",
                      {"positional": pos, "symbolic": sym})


def _strict_5(let: RunAnalyses) -> RuleResult:
    c = _counted(let)
    if c is None:
        return _missing("5", "Letter's scores at every checkpoint")
    pos, sym = c
    l0_end = int(_pure_state(let.pos, let.sym)[-1, 0, 0])
    holds = not pos and sym == list(range(1, let.pos.shape[1])) and l0_end == 0
    kind = {0: "not pure", 1: "positional", -1: "symbolic"}[l0_end]
    return RuleResult("5", holds, f"counted positional L{pos}, symbolic L{sym}; L0 at the end: "
                      f"{kind}", {"positional": pos, "symbolic": sym, "l0_end": l0_end})


def _strict_6(run: RunAnalyses) -> RuleResult:
    key = f"6 {run.task}"
    if run.pos is None or run.history is None or run.steps is None:
        return _missing(key, "scores at every checkpoint and the training history")
    T = convergence_step(run.history)
    steps = list(run.steps)
    if math.isinf(T):
        return RuleResult(key, False, "never converges (T = ∞)", {"T": T})
    if int(T) not in steps:
        return _missing(key, f"a checkpoint at T = {int(T)}")
    state = _pure_state(run.pos, run.sym)[:, :, 0]
    at = steps.index(int(T))
    want = range(state.shape[1]) if run.task == "number" else range(1, state.shape[1])
    bad = [layer for layer in want
           if int(state[at, layer]) == 0 or bool((state[at:, layer] != state[at, layer]).any())]
    return RuleResult(key, not bad, f"T = {int(T)}: not pure at T or not stably after: "
                      f"{'L' + str(bad) if bad else 'none'}", {"T": T, "bad": bad})


def _strict_9(let: RunAnalyses) -> RuleResult:
    if let.labels is None:
        return _missing("9", "Letter's attention roles")
    flat = [x for row in let.labels for x in row]
    first = [row[0] for row in let.labels[:4]]
    holds = "Index" not in flat and all(x == "Retrieval" for x in first)
    return RuleResult("9", holds, f"labels L0-L3: {first}; Index anywhere: {'Index' in flat}",
                      {"first": first})


def _strict_16(num: RunAnalyses, let: RunAnalyses) -> RuleResult:
    n_layers = let.gap_max[17].shape[0] if let.gap_max and 17 in let.gap_max else 12
    xn = _gap_ratio(num, range(4), "max")
    xl = _gap_ratio(let, range(1, n_layers), "max")
    if xn is None or xl is None:
        return _missing("16", "trained heads' gaps at 17 and 300 (both tasks)")
    return RuleResult("16", xn < 1 and xn < xl, f"max gap(300)/max gap(17): Number L0-L3 "
                      f"{xn:.2f}, Letter L1-L{n_layers - 1} {xl:.2f}",
                      {"number": xn, "letter": xl})


def judge_seed_strict(number: RunAnalyses | None, letter: RunAnalyses | None
                      ) -> dict[str, RuleResult]:
    """The strict rules (:data:`STRICT_RULES`) on one ``(preset, seed)``'s two runs;
    claims 13-15's strict rules read the length cells
    (:func:`lens_possym.papers.c.readings.reading_claims`)."""
    num = number or RunAnalyses("number", "", -1)
    let = letter or RunAnalyses("letter", "", -1)
    for run, task in ((num, "number"), (let, "letter")):
        if run.task != task:
            raise InvalidSelectionError(f"expected a {task} run, got {run.task!r}")
    out = [_strict_4(num), _strict_5(let), _strict_6(num), _strict_6(let), _strict_9(let),
           _strict_16(num, let)]
    return {r.key: r for r in out}


def judge_theory(constructions: dict[str, float] | None, index_table: list[dict] | None,
                 index_table_all: list[dict] | None = None) -> dict[str, RuleResult]:
    """Rules 11 and 12 (no seed): construction accuracies at length 17, and the Index
    bound table over the task's offsets for lengths 17..1000 (θ = 0.8) beside the one
    over all offsets."""
    out = {}
    if constructions:
        worst = min(constructions.values())
        out["11"] = RuleResult("11", worst >= 0.99, ", ".join(
            f"{k} {v:.3f}" for k, v in constructions.items()))
    else:
        out["11"] = _missing("11", "construction accuracies")
    if index_table:
        rows = [r for r in index_table if 17 <= r["n"] <= 1000]
        held = sum(r["max_holds"] for r in rows)
        share = held / len(rows)
        text = (f"task offsets: max within the bound at {held}/{len(rows)} lengths "
                f"({100 * share:.1f} %); min at {sum(r['min_holds'] for r in rows)}/{len(rows)}")
        if index_table_all:
            rows_all = [r for r in index_table_all if 17 <= r["n"] <= 1000]
            text += (f"; all offsets: max at {sum(r['max_holds'] for r in rows_all)}/"
                     f"{len(rows_all)}, min at {sum(r['min_holds'] for r in rows_all)}/"
                     f"{len(rows_all)}")
        out["12"] = RuleResult("12", share >= 0.99, text, {"share": share})
    else:
        out["12"] = _missing("12", "the Index bound table")
    return out


def verdict(results: Sequence[RuleResult | None], n_seeds: int = 3) -> str:
    """``"holds"`` (in at least two of ``n_seeds`` seeds), ``"does not hold"`` (fails in
    at least two), else ``"pending"``. For a rule without a seed pass one result and
    ``n_seeds=1``: then it holds or not by that result."""
    if n_seeds == 1:
        r = results[0] if results else None
        if r is None or r.holds is None:
            return "pending"
        return "holds" if r.holds else "does not hold"
    n_hold = sum(1 for r in results if r is not None and r.holds is True)
    n_fail = sum(1 for r in results if r is not None and r.holds is False)
    need = n_seeds // 2 + 1                     # 2 of 3
    if n_hold >= need:
        return "holds"
    if n_fail > n_seeds - need:
        return "does not hold"
    return "pending"


def stack_scores(pos: Sequence, sym: Sequence) -> tuple[Tensor, Tensor]:
    """Tensors ``[n_ckpt, n_layers, n_heads]`` from nested lists (a cached trajectory)."""
    return torch.as_tensor(pos, dtype=torch.float32), torch.as_tensor(sym, dtype=torch.float32)


# ---- the verdict table from committed inputs -------------------------------------------

_TENSORS = ("pos", "sym", "hop_by_stop", "lens_decoded", "patch_restore")


def analyses_to_dict(run: RunAnalyses) -> dict:
    """Plain JSON of what the rules read from one run (tensors as nested lists, integer
    keys as strings, a non-finite float as ``null``: strict JSON);
    :func:`analyses_from_dict` reads it back (``null`` as ``nan``)."""
    out: dict = {"task": run.task, "preset": run.preset, "seed": run.seed,
                 "history": None if run.history is None else [list(h) for h in run.history],
                 "steps": run.steps, "accuracy_by_hops": run.accuracy_by_hops,
                 "labels": run.labels,
                 "lengths": None if run.lengths is None else
                 {str(n): a for n, a in run.lengths.items()}}
    for name in _TENSORS:
        t = getattr(run, name)
        out[name] = None if t is None else t.tolist()
    for name in ("gap_min", "gap_max"):
        d = getattr(run, name)
        out[name] = None if d is None else {str(n): t.tolist() for n, t in d.items()}
    return to_jsonable(out)


def nan_list(x: Any) -> Any:
    """Nested lists (or one value) read back from JSON (:func:`analyses_to_dict`, the stage
    cache): ``null`` as ``nan``."""
    if isinstance(x, list):
        return [nan_list(v) for v in x]
    return math.nan if x is None else x


def analyses_from_dict(data: dict) -> RunAnalyses:
    run = RunAnalyses(data["task"], data["preset"], int(data["seed"]),
                      history=None if data["history"] is None else
                      [(int(s), float(a)) for s, a in data["history"]],
                      steps=data["steps"],
                      accuracy_by_hops=None if data["accuracy_by_hops"] is None else
                      nan_list(data["accuracy_by_hops"]),
                      labels=data["labels"],
                      lengths=None if data["lengths"] is None else
                      {int(n): float(nan_list(a)) for n, a in data["lengths"].items()})
    for name in _TENSORS:
        if data.get(name) is not None:
            setattr(run, name, tensor_from_json(data[name]).float())
    for name in ("gap_min", "gap_max"):
        if data.get(name) is not None:
            setattr(run, name, {int(n): tensor_from_json(t).float()
                                for n, t in data[name].items()})
    return run
