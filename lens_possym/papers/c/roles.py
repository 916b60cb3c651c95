r"""Head roles in a trained multi-hop model (paper C Sec 3.2, App F.1): read from attention
patterns as the paper did, then confirmed causally with lens-possym's head ablation and
patching (the paper reports neither).

**From attention** (:func:`attention_roles`). For each head and each prompt with hop path
``p_0 > p_1 > … > p_h`` the pattern gives, per hop count ``h`` and stop ``k``:

* ``hop_by_stop[ℓ, head, h-1, k]``: mass from ``p_k`` on the next stop ``p_{k+1}``
  (``k < h``; Selective Index in Number, where the next stop is ``p_k - σ_{p_k}``;
  Retrieval in Letter, where it is the pair whose first letter is ``p_k``'s second);
* ``answer_by_stop[ℓ, head, h-1, k]``: mass from ``p_k`` on the answer position ``p_h``;
* ``hop[ℓ, head]``, the **hop share on the schedule**: paper C's decomposition
  ``Reflexive^{ℓ-h} ∘ Index^h`` has layer ``ℓ`` move the answer from ``p_{k+1}`` to
  ``p_k`` for ``k = h-1-ℓ``, so layer ``ℓ``'s share is the mean, over the hop counts
  ``h > ℓ``, of ``hop_by_stop[ℓ, :, h-1, h-1-ℓ]`` (``nan`` for layers ``>= max_hops``,
  which the schedule leaves to Reflexive). A head that makes the last hop of 4-hop
  prompts only (Number's L3 reads ``p_1`` from the query) scores its share there, not
  a mean over every stop;
* ``reflexive[ℓ, head]``: mass from the query ``p_0`` on itself and on the stops that
  carry the answer once it has arrived, ``p_0..p_{h-1}``: **the answer position ``p_h``
  excluded**, since reading the answer there is a direct read, not the identity;
* ``stop_mass`` ``[n_layers, n_heads, max_hops, max_hops + 1]``: mass from the query on
  each stop ``p_j`` (``j = 0`` itself) for the prompts with ``h`` hops (row ``h - 1``).

Label (one per head; ``threshold`` default 0.5, :func:`label_roles`): ``"Index"`` if
``hop >= threshold`` and the head is positional (``s_POS > s_SYM`` on the same prompts);
``"Retrieval"`` if ``hop >= threshold`` and not; ``"Reflexive"`` if ``reflexive >=
threshold``; ``"other"``.

**Causal** (:func:`causal_roles`).

* *Ablation*: each head mean-ablated alone (the core's ``head_importance``, ``mode="mean",
  per_position=True``, means over the same prompts), accuracy per hop count
  ``[n_layers, n_heads, max_hops]``. A hop head of layer ``ℓ`` should matter for prompts
  with more than ``ℓ`` hops at least.
* *Patching*: corrupted prompts differ from the clean ones only in the answer token's
  value (Number: another letter at ``p_h``; Letter: another digit on the same letter, so
  the path is unchanged). Head ``ℓ``'s output at stop ``p_k`` is patched from the clean run
  into the corrupted one (``patch_heads``, prompts grouped by the position of ``p_k``);
  ``restore[h-1, ℓ, k]`` is the share of ``h``-hop prompts whose prediction becomes the
  clean answer. In the paper's chain ``f = Reflexive^{ℓ-h} ∘ Index^h`` the answer reaches
  ``p_k`` at layer ``h - 1 - k``, so that head, at that stop, should restore it
  (:meth:`CausalRoles.chain_restore`). One head's output fails this test when several
  heads carry the answer together; :mod:`lens_possym.papers.c.chain` patches the whole
  residual stream at each stop instead, and reads it with a logit lens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ...errors import InvalidSelectionError
from ...results_io import ResultIO, head_frame, lists_to_tensors
from ...training.tasks import TaskBatch
from .tasks import LetterTask, MultiHopTask, NumberTask
from ...capture import capture_attention_inputs
from .dynamics import score_model
from ...interventions import ImportanceBatch, head_importance, patch_heads
from ...interventions.heads import z_hook_names

__all__ = ["AttentionRoles", "attention_roles", "label_roles", "schedule_share", "CausalRoles",
           "causal_roles", "corrupt_answers", "ROLES"]

ROLES = ("Index", "Retrieval", "Reflexive", "other")


@dataclass(repr=False)
class AttentionRoles(ResultIO):
    """Attention shares and labels (module docstring).

    Attributes:
        hop: ``[n_layers, n_heads]`` hop share on the schedule (``nan`` past ``max_hops``).
        reflexive: ``[n_layers, n_heads]`` query mass on ``p_0..p_{h-1}``.
        hop_by_stop, answer_by_stop: ``[n_layers, n_heads, max_hops (h-1), max_hops (k)]``.
        stop_mass: ``[n_layers, n_heads, max_hops, max_hops + 1]``.
        pos, sym: ``[n_layers, n_heads]`` scores on the same prompts.
        labels: ``[n_layers][n_heads]`` one of :data:`ROLES`.
    """

    hop: Tensor
    reflexive: Tensor
    hop_by_stop: Tensor
    answer_by_stop: Tensor
    stop_mass: Tensor
    pos: Tensor
    sym: Tensor
    labels: list[list[str]]
    threshold: float

    def to_dict(self) -> dict:
        return {"hop": self.hop.tolist(), "reflexive": self.reflexive.tolist(),
                "hop_by_stop": self.hop_by_stop.tolist(),
                "answer_by_stop": self.answer_by_stop.tolist(),
                "stop_mass": self.stop_mass.tolist(), "pos": self.pos.tolist(),
                "sym": self.sym.tolist(), "labels": self.labels, "threshold": self.threshold}

    FORMAT = "lens-possym/paper-c-attention-roles@1"

    @classmethod
    def from_dict(cls, data: dict) -> "AttentionRoles":
        return super().from_dict(lists_to_tensors(data, (
            "hop", "reflexive", "hop_by_stop", "answer_by_stop", "stop_mass", "pos", "sym")))

    def summary(self) -> dict:
        flat = [label for row in self.labels for label in row]
        return {"threshold": self.threshold, **{role: flat.count(role) for role in ROLES}}

    def _table(self):
        """One row per head and number (``hop``, ``reflexive``, ``pos``, ``sym``), with the
        head's ``role``."""
        frame = head_frame({name: getattr(self, name) for name in
                            ("hop", "reflexive", "pos", "sym")}, None)
        frame = frame.drop(columns=["frequency", "angle"])
        frame.insert(2, "role", [self.labels[layer][head]
                                 for layer, head in zip(frame["layer"], frame["head"])])
        return frame


def schedule_share(hop_by_stop: Tensor) -> Tensor:
    """``[n_layers, n_heads]``: layer ``ℓ``'s hop share at the stops the schedule
    ``ℓ = h-1-k`` gives it, the mean over ``h > ℓ`` (``nan`` where it gives none)."""
    n_layers, n_heads, H, _ = hop_by_stop.shape
    out = torch.full((n_layers, n_heads), float("nan"))
    for layer in range(min(n_layers, H)):
        cells = [hop_by_stop[layer, :, h - 1, h - 1 - layer] for h in range(layer + 1, H + 1)]
        cells = torch.stack(cells)                               # [n_h, n_heads]
        seen = torch.isfinite(cells)
        if seen.any():
            out[layer] = torch.where(seen, cells, 0).sum(0) / seen.sum(0).clamp_min(1)
    return out


def label_roles(hop: Tensor, reflexive: Tensor, pos: Tensor, sym: Tensor,
                threshold: float = 0.5) -> list[list[str]]:
    """One of :data:`ROLES` per head from its schedule hop share and reflexive share."""
    if not 0 < threshold <= 1:
        raise InvalidSelectionError(f"threshold must be in (0, 1], got {threshold}")
    labels = []
    for layer in range(hop.shape[0]):
        row = []
        for head in range(hop.shape[1]):
            h = float(hop[layer, head])
            if h == h and h >= threshold:
                row.append("Index" if pos[layer, head] > sym[layer, head] else "Retrieval")
            elif float(reflexive[layer, head]) >= threshold:
                row.append("Reflexive")
            else:
                row.append("other")
        labels.append(row)
    return labels


@torch.no_grad()
def attention_roles(bridge, task: MultiHopTask, batch: TaskBatch, *, threshold: float = 0.5,
                    fwd_hooks=()) -> AttentionRoles:
    """Roles of every head from its attention patterns on ``batch`` (module docstring).

    ``fwd_hooks`` run during the pass the patterns are read from (e.g. a hand-built
    pattern written into ``blocks.{L}.attn.hook_pattern``); the scores that tell Index
    from Retrieval are the model's own."""

    if not 0 < threshold <= 1:
        raise InvalidSelectionError(f"threshold must be in (0, 1], got {threshold}")
    hops, path = task.hop_path(batch.tokens)
    captured = capture_attention_inputs(bridge, batch.tokens, query_positions=None,
                                        fwd_hooks=fwd_hooks)
    rows = torch.arange(len(batch))
    H = task.max_hops
    hop_out, ans_out, refl_out, stop_out = [], [], [], []
    for layer in sorted(captured):
        a = captured[layer].model_pattern.float().cpu()            # [batch, head, q, k]
        n_heads = a.shape[1]
        hop = torch.full((n_heads, H, H), float("nan"))
        ans = torch.full((n_heads, H, H), float("nan"))
        stops = torch.full((n_heads, H, H + 1), float("nan"))
        carried = torch.zeros(len(batch), a.shape[-1], dtype=torch.bool)
        for h in range(1, H + 1):
            on = rows[hops == h]
            if not len(on):
                continue
            for k in range(h):
                src, dst = path[on, k], path[on, k + 1]
                hop[:, h - 1, k] = a[on, :, src, dst].mean(0)
                ans[:, h - 1, k] = a[on, :, src, path[on, h]].mean(0)
            for j in range(h + 1):
                stops[:, h - 1, j] = a[on, :, -1, path[on, j]].mean(0)
            for j in range(h):                                     # p_0..p_{h-1}
                carried[on, path[on, j]] = True
        refl = (a[:, :, -1] * carried[:, None, :]).sum(-1).mean(0)
        hop_out.append(hop)
        ans_out.append(ans)
        refl_out.append(refl)
        stop_out.append(stops)
    hop_by_stop, answer_by_stop = torch.stack(hop_out), torch.stack(ans_out)
    reflexive = torch.stack(refl_out)
    hop = schedule_share(hop_by_stop)
    pos, sym = score_model(bridge, batch.tokens)
    labels = label_roles(hop, reflexive, pos, sym, threshold)
    return AttentionRoles(hop, reflexive, hop_by_stop, answer_by_stop, torch.stack(stop_out),
                          pos, sym, labels, float(threshold))


def corrupt_answers(task: MultiHopTask, batch: TaskBatch, *, seed: int = 0) -> TaskBatch:
    """The same prompts with only the answer token's value changed (module docstring):
    another letter (Number) or another digit on the same letter (Letter)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = batch.tokens.clone()
    rows = torch.arange(len(batch))
    old = tokens[rows, batch.answer_pos]
    if isinstance(task, NumberTask):
        shift = torch.randint(1, task.n_letters, (len(batch),), generator=gen)
        new = (old + shift) % task.n_letters
    elif isinstance(task, LetterTask):
        if task.n_digits < 2:
            raise InvalidSelectionError("corrupting a Letter answer needs n_digits >= 2")
        letter, digit = old // task.n_digits, old % task.n_digits
        shift = torch.randint(1, task.n_digits, (len(batch),), generator=gen)
        new = letter * task.n_digits + (digit + shift) % task.n_digits
    else:
        raise InvalidSelectionError(
            f"corrupt_answers reads Number or Letter tasks, got {task.name!r}")
    tokens[rows, batch.answer_pos] = new
    return TaskBatch(tokens, new, batch.answer_pos.clone())


@dataclass(repr=False)
class CausalRoles(ResultIO):
    """Ablation and patching results (module docstring).

    Attributes:
        clean_accuracy_by_hops: ``[max_hops]`` without intervention.
        ablated_accuracy_by_hops: ``[n_layers, n_heads, max_hops]``.
        restore: ``[max_hops (h-1), n_layers, max_hops (k)]`` share of ``h``-hop prompts
            restored by patching layer ``ℓ``'s head at stop ``p_k`` (``nan`` for ``k >= h``);
            one head per layer, as in paper C (other models are refused).
        corrupted_accuracy: share of corrupted prompts predicting the *clean* answer.
    """

    clean_accuracy_by_hops: list[float]
    ablated_accuracy_by_hops: Tensor
    restore: Tensor
    corrupted_accuracy: float

    def chain_restore(self) -> tuple[float, float]:
        """Mean restoration on the chain (``ℓ = h - 1 - k``) and off it (``k < h``)."""
        n_h, n_layers, _ = self.restore.shape
        on, off = [], []
        for h in range(1, n_h + 1):
            for layer in range(n_layers):
                for k in range(h):
                    value = float(self.restore[h - 1, layer, k])
                    (on if layer == h - 1 - k else off).append(value)
        mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
        return mean(on), mean(off)

    def to_dict(self) -> dict:
        return {"clean_accuracy_by_hops": self.clean_accuracy_by_hops,
                "ablated_accuracy_by_hops": self.ablated_accuracy_by_hops.tolist(),
                "restore": self.restore.tolist(), "corrupted_accuracy": self.corrupted_accuracy,
                "chain_restore": list(self.chain_restore())}

    FORMAT = "lens-possym/paper-c-causal-roles@1"

    @classmethod
    def from_dict(cls, data: dict) -> "CausalRoles":
        return super().from_dict(lists_to_tensors(data, ("ablated_accuracy_by_hops", "restore")))

    def summary(self) -> dict:
        on, off = self.chain_restore()
        return {"clean_accuracy_by_hops": self.clean_accuracy_by_hops,
                "corrupted_accuracy": self.corrupted_accuracy,
                "chain_restore": on, "off_chain_restore": off}

    def _table(self):
        """One row per head and hop count: ``layer``, ``head``, ``hops``, the accuracy with
        the head mean-ablated (``score`` ``ablated_accuracy``) and ``value``."""
        frame = head_frame({"ablated_accuracy": self.ablated_accuracy_by_hops}, None,
                           dims=("layer", "head", "hops"))
        return frame.drop(columns=["angle"], errors="ignore")


@torch.no_grad()
def _correct(logits: Tensor, batch: ImportanceBatch) -> Tensor:
    """Per prompt, whether the last position's top token is the answer (1.0 or 0.0)."""
    return (logits[:, -1].argmax(-1) == batch.answers).float()


def causal_roles(bridge, task: MultiHopTask, batch: TaskBatch, *, seed: int = 0) -> CausalRoles:
    """Mean-ablate every head and patch every head at every stop (module docstring)."""

    hops, path = task.hop_path(batch.tokens)
    n_layers = len(z_hook_names(bridge))
    n_heads = bridge.cfg.n_heads
    if n_heads != 1:
        raise InvalidSelectionError(
            f"causal_roles reads one head per layer (paper C's model); this model has {n_heads}")
    H = task.max_hops

    def by_hops(pred: Tensor, answers: Tensor) -> list[float]:
        ok = (pred == answers).float()
        return [float(ok[hops == h].mean()) if (hops == h).any() else float("nan")
                for h in range(1, H + 1)]

    tokens = batch.tokens
    clean = by_hops(bridge(tokens)[:, -1].argmax(-1), batch.answers)
    correct = head_importance(  # each head mean-ablated alone; whether each prompt is right
        bridge, ImportanceBatch(tokens=tokens, answers=batch.answers), _correct, mode="mean",
        per_position=True, reference=tokens, heads_per_pass=1, last_token_only=False
    ).per_prompt.float()
    ablated = torch.zeros(n_layers, n_heads, H)
    for layer in range(n_layers):
        ablated[layer, 0] = torch.tensor([
            float(correct[layer, 0][hops == h].mean()) if (hops == h).any() else float("nan")
            for h in range(1, H + 1)])
    corrupted = corrupt_answers(task, batch, seed=seed)
    names = z_hook_names(bridge)
    _, cache = bridge.run_with_cache(tokens, names_filter=list(names.values()))
    clean_z = {name: cache[name] for name in names.values()}
    base_pred = bridge(corrupted.tokens)[:, -1].argmax(-1)
    restore = torch.full((H, n_layers, H), float("nan"))
    for h in range(1, H + 1):
        rows_h = (hops == h).nonzero().flatten()
        if not len(rows_h):
            continue
        for k in range(h):
            where = path[rows_h, k]
            for layer in range(n_layers):
                hits = 0
                for q in where.unique().tolist():
                    sel = rows_h[where == q]
                    source = {names[layer]: clean_z[names[layer]][sel]}
                    with patch_heads(bridge, source, f"{layer}.0", positions=q):
                        pred = bridge(corrupted.tokens[sel])[:, -1].argmax(-1)
                    hits += int((pred == batch.answers[sel]).sum())
                restore[h - 1, layer, k] = hits / len(rows_h)
    return CausalRoles(clean, ablated, restore,
                       float((base_pred == batch.answers).float().mean()))
