"""``--prompts FILE`` (profile, ablate, heads) and ``--model PATH`` (a GGUF file or a
Hugging Face folder) on the command line."""

from __future__ import annotations

import pytest
import torch

from lens_possym.cli import main
from lens_possym.scores import PosSymScores



def _prompt_file(tmp_path, lines, suffix=".txt"):
    path = tmp_path / f"prompts{suffix}"
    path.write_text("\n".join(lines) + "\n")
    return path


PROMPTS = ["Alice likes red . Bob likes blue . What color does Bob like ?",
           "Carol likes green . Dave likes black .",
           "",
           "Eve likes pink . Frank likes gold . Grace likes gray ."]


def test_profile_scores_your_prompts_of_any_lengths(tmp_path):
    """--prompts of three lengths: the scores are the mean of each prompt's own scores."""
    import lens_possym as lp

    path = _prompt_file(tmp_path, PROMPTS)
    out = tmp_path / "prof"
    assert main(["profile", "--model", "tiny-llama", "--prompts", str(path), "--no-report",
                 "--out", str(out)]) == 0
    scores = PosSymScores.load(out / "scores.json")
    assert scores.task["name"] == "prompts" and scores.task["n_prompts"] == 3
    model = lp.tiny_model("llama")
    alone = [lp.swap_scores(model, p) for p in PROMPTS if p]
    for name in ("pos", "sym", "pos_freq", "positional_share"):
        expected = torch.stack([getattr(s, name) for s in alone]).mean(0)
        torch.testing.assert_close(getattr(scores, name).double(), expected.double(),
                                   rtol=0, atol=1e-12)


def test_profile_of_a_saved_hugging_face_folder_with_jsonl_prompts(tmp_path):
    import json

    import lens_possym as lp

    folder = tmp_path / "tiny-qwen2"
    hf_model, tokenizer = lp.models.tiny_hf_model("qwen2")
    hf_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS if p))
    out = tmp_path / "prof"
    assert main(["profile", "--model", str(folder), "--prompts", str(path), "--field", "prompt",
                 "--out", str(out)]) == 0
    assert (out / "report.html").exists() and (out / "plane.png").exists()
    scores = PosSymScores.load(out / "scores.json")
    assert scores.model_name == str(folder) and scores.task["n_prompts"] == 3
    assert scores.pos.isfinite().all()


@pytest.mark.slow
def test_profile_of_the_smollm2_gguf_file_with_your_prompts(tmp_path):
    from lens_possym.models.registry import KNOWN_MODELS

    gguf = KNOWN_MODELS["smollm2-135m"].gguf_path()
    path = _prompt_file(tmp_path, ["The capital of France is Paris.",
                                   "Alice likes red and Bob likes blue."])
    out = tmp_path / "prof"
    assert main(["profile", "--model", str(gguf), "--prompts", str(path), "--layers", "0,29",
                 "--out", str(out)]) == 0
    assert (out / "report.html").exists()
    scores = PosSymScores.load(out / "scores.json")
    assert scores.pos[[0, 29]].isfinite().all() and scores.pos[1:29].isnan().all()


def test_bad_prompt_files_are_one_line(tmp_path, capsys):
    empty = _prompt_file(tmp_path, ["", " "])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "Alice likes red"}\n{"txt": "Bob"}\n')
    for path, message in ((tmp_path / "missing.txt", "no prompts file"),
                          (empty, "holds no prompts"), (bad, "bad.jsonl:2 has no 'text' field")):
        code = main(["profile", "--model", "tiny-llama", "--prompts", str(path),
                     "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 1 and message in err and "Traceback" not in err, err


def test_ablate_and_heads_take_your_prompts(tmp_path):
    """The prompts cut to the shortest length; the loss is the cross-entropy of each
    prompt's last kept token, by hand."""
    import json

    import lens_possym as lp

    path = _prompt_file(tmp_path, PROMPTS)
    model = lp.tiny_model("llama")
    rows = [model.to_tokens(p)[0] for p in PROMPTS if p]
    n = min(len(r) for r in rows)
    full = torch.stack([r[:n] for r in rows])
    with torch.no_grad():
        logits = model(full[:, :-1])[:, -1]
    loss = float(torch.nn.functional.cross_entropy(logits, full[:, -1]))
    out = tmp_path / "abl"
    assert main(["ablate", "--model", "tiny-llama", "--prompts", str(path), "--heads", "1.0",
                 "--freqs", "low", "--out", str(out)]) == 0
    payload = json.loads((out / "ablate.json").read_text())
    assert payload["task"] == "prompts" and payload["n_prompts"] == 3
    assert payload["before"]["loss"] == pytest.approx(loss, abs=1e-6)
    assert set(payload["after"]) == {"accuracy", "loss"}
    out = tmp_path / "heads"
    assert main(["heads", "--model", "tiny-llama", "--prompts", str(path), "--no-progress",
                 "--out", str(out)]) == 0
    result = json.loads((out / "heads.json").read_text())
    assert result["baseline"] == pytest.approx(loss, abs=1e-6)
    assert result["config"]["metric"] == "loss"
