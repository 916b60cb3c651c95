r"""Head roles in a trained multi-hop model (paper C Sec 3.2, App F.1): read from attention
patterns as the paper did, then confirmed causally with lens-possym's head ablation and
patching (the paper reports neither).

**From attention** (:func:`attention_roles`). For each head and each prompt with hop path
``p_0 > p_1 > … > p_h`` the pattern gives

* ``hop``: mass from each stop ``p_k`` (``k < h``) on the next stop ``p_{k+1}``, averaged
  over stops and prompts: a head that follows the hops (Selective Index in Number, where
  the next stop is ``p_k - σ_{p_k}``; Retrieval in Letter, where it is the pair whose first
  letter is ``p_k``'s second);
* ``self``: mass from each stop on itself;
* ``path_last``: mass from the query ``p_0`` on the later stops ``p_1..p_h``, which carry
  the answer once it has arrived there;
* ``stop_mass`` ``[n_layers, n_heads, max_hops, max_hops + 1]``: mass from the query on
  each stop ``p_j`` (``j = 0`` itself) for the prompts with ``h`` hops (row ``h - 1``):
  which stop the last token reads at each layer (a chain copied backwards shows the query
  reading ``p_1`` late; a pointer followed forwards shows it reading ``p_ℓ`` at layer ``ℓ``).

Label (one per head; ``threshold`` default 0.5): ``"Selective Index"`` if ``hop >=
threshold`` and the head is positional (``s_POS > s_SYM`` on the same prompts);
``"Retrieval"`` if ``hop >= threshold`` and symbolic; ``"Reflexive"`` if not hop-following
but ``self + path_last >= threshold`` (the identity: it attends to itself or to stops that
already carry the answer; either implementation is allowed by the paper); ``"other"``.

**Causal** (:func:`causal_roles`).

* *Ablation*: each head mean-ablated (``ablate_heads(..., mode="mean", per_position=True)``
  over the same prompts), accuracy per hop count ``[n_layers, n_heads, max_hops]``. A hop
  head of layer ``ℓ`` should matter for prompts with more than ``ℓ`` hops at least.
* *Patching*: corrupted prompts differ from the clean ones only in the answer token's
  value (Number: another letter at ``p_h``; Letter: another digit on the same letter, so
  the path is unchanged). Head ``ℓ``'s output at stop ``p_k`` is patched from the clean run
  into the corrupted one (``patch_heads``, prompts grouped by the position of ``p_k``);
  ``restore[h-1, ℓ, k]`` is the share of ``h``-hop prompts whose prediction becomes the
  clean answer. In the paper's chain ``f = Reflexive^{ℓ-h} ∘ Index^h`` the answer reaches
  ``p_k`` at layer ``h - 1 - k``, so that head, at that stop, should restore it
  (:meth:`CausalRoles.chain_restore`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ...errors import InvalidSelectionError
from ...training.tasks import TaskBatch
from .tasks import LetterTask, MultiHopTask, NumberTask
from ...capture import capture_attention_inputs
from .dynamics import score_model
from ...interventions import ablate_heads, patch_heads
from ...interventions.heads import z_hook_names

__all__ = ["AttentionRoles", "attention_roles", "CausalRoles", "causal_roles", "corrupt_answers"]

ROLES = ("Selective Index", "Retrieval", "Reflexive", "other")


@dataclass
class AttentionRoles:
    """Attention shares and labels ``[n_layers, n_heads]`` (module docstring)."""

    hop: Tensor
    self_share: Tensor
    path_last: Tensor
    pos: Tensor
    sym: Tensor
    labels: list[list[str]]
    threshold: float
    stop_mass: Tensor | None = None

    def to_dict(self) -> dict:
        return {"hop": self.hop.tolist(), "self": self.self_share.tolist(),
                "path_last": self.path_last.tolist(), "pos": self.pos.tolist(),
                "stop_mass": None if self.stop_mass is None else self.stop_mass.tolist(),
                "sym": self.sym.tolist(), "labels": self.labels, "threshold": self.threshold}


@torch.no_grad()
def attention_roles(bridge, task: MultiHopTask, batch: TaskBatch, *, threshold: float = 0.5
                    ) -> AttentionRoles:
    """Roles of every head from its attention patterns on ``batch`` (module docstring)."""

    if not 0 < threshold <= 1:
        raise InvalidSelectionError(f"threshold must be in (0, 1], got {threshold}")
    hops, path = task.hop_path(batch.tokens)
    captured = capture_attention_inputs(bridge, batch.tokens, query_positions=None)
    rows = torch.arange(len(batch))
    hop_out, self_out, last_out, stop_out = [], [], [], []
    H = task.max_hops
    for layer in sorted(captured):
        a = captured[layer].model_pattern.float()               # [batch, head, q, k]
        hop_sum = torch.zeros(a.shape[1])
        self_sum = torch.zeros(a.shape[1])
        count = 0
        for k in range(task.max_hops):
            on = hops > k
            src, dst = path[on, k], path[on, k + 1]
            r = rows[on]
            hop_sum += a[r, :, src, dst].sum(0)
            self_sum += a[r, :, src, src].sum(0)
            count += int(on.sum())
        later = torch.zeros(len(batch), a.shape[-1], dtype=torch.bool)
        for k in range(1, task.max_hops + 1):
            on = path[:, k] >= 0
            later[rows[on], path[on, k]] = True
        last = (a[:, :, -1] * later[:, None, :]).sum(-1).mean(0)
        stops = torch.full((a.shape[1], H, H + 1), float("nan"))
        for h in range(1, H + 1):
            on = hops == h
            if on.any():
                for j in range(h + 1):
                    stops[:, h - 1, j] = a[rows[on], :, -1, path[on, j]].mean(0)
        stop_out.append(stops)
        hop_out.append(hop_sum / count)
        self_out.append(self_sum / count)
        last_out.append(last)
    hop, selfs, path_last = torch.stack(hop_out), torch.stack(self_out), torch.stack(last_out)
    pos, sym = score_model(bridge, batch.tokens)
    labels = []
    for layer in range(hop.shape[0]):
        row = []
        for head in range(hop.shape[1]):
            if hop[layer, head] >= threshold:
                row.append("Selective Index" if pos[layer, head] > sym[layer, head]
                           else "Retrieval")
            elif selfs[layer, head] + path_last[layer, head] >= threshold:
                row.append("Reflexive")
            else:
                row.append("other")
        labels.append(row)
    return AttentionRoles(hop, selfs, path_last, pos, sym, labels, float(threshold),
                          torch.stack(stop_out))


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


@dataclass
class CausalRoles:
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


@torch.no_grad()
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
    ablated = torch.zeros(n_layers, n_heads, H)
    for layer in range(n_layers):
        with ablate_heads(bridge, f"{layer}.0", mode="mean", reference=tokens,
                          per_position=True):
            ablated[layer, 0] = torch.tensor(by_hops(bridge(tokens)[:, -1].argmax(-1),
                                                     batch.answers))
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
