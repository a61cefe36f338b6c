"""`python -m fundamentallm record try`: a learner's recipe judged by the records page's rule."""

import json

import pytest

from fundamentallm.__main__ import main
from fundamentallm.speedrun import RULE_SEEDS, STEPS, permutation_p_value, verdict

QUICK = ["--seeds", "2", "--steps", "6", "--threads", "1"]


@pytest.fixture
def corpus(tmp_path):
    """A small text (the rule's runs evaluate the whole validation split: keep it short here)."""
    from fundamentallm.data import load_corpus

    path = tmp_path / "corpus.txt"
    path.write_text(load_corpus("python-docs")[:30_000], encoding="utf-8")
    return str(path)


def test_the_rule_needs_every_condition():
    good = {"p_value": 0.004, "train_time_ratio": 0.97, "mean_diff": -0.01}
    assert verdict(good, RULE_SEEDS, STEPS)["new_record"]
    for seeds, steps, change in ((4, STEPS, {}), (RULE_SEEDS, 100, {}), (RULE_SEEDS, STEPS, {"p_value": 0.01}),
                                 (RULE_SEEDS, STEPS, {"train_time_ratio": 1.01})):
        judged = verdict({**good, **change}, seeds, steps)
        assert not judged["new_record"] and sum(not held for held in judged["conditions"].values()) == 1


def test_five_seeds_each_all_below_is_the_smallest_p():
    assert permutation_p_value([1.0, 1.1, 1.2, 1.3, 1.4], [2.0, 2.1, 2.2, 2.3, 2.4]) == pytest.approx(1 / 252)
    assert permutation_p_value([1.0] * 5, [1.0] * 5) == 1.0  # ties count against the candidate


def test_a_recipe_against_itself_is_not_a_record_and_its_json_reproduces_it(tmp_path, corpus, capsys):
    out = tmp_path / "try.json"
    assert main(["record", "try", "ours", "--against", "ours", "--corpus", corpus, "--out", str(out),
                 *QUICK]) == 0
    printed = capsys.readouterr().out
    assert "verdict: not a new record" in printed and "not p < 0.01" in printed
    assert "bf16 instructions: " in printed  # the records' bf16 products are emulated on a CPU without them
    first = json.loads(out.read_text())
    assert isinstance(first["machine"]["cpu_bf16"], bool)
    run = first["run"]
    assert run["ours+"]["val_loss"] == run["ours"]["val_loss"]  # the same seeds: the same losses
    assert first["new_record"] is False and first["p_value"] >= 0.01
    for key in ("machine", "torch", "seeds", "overrides", "commit", "reproduce", "corpus", "steps"):
        assert key in first
    # rerun from the JSON's own command line: the verdict's numbers again
    again = tmp_path / "again.json"
    argv = first["reproduce"].split()[3:] + ["--out", str(again), "--threads", "1"]
    assert main(argv) == 0
    second = json.loads(again.read_text())
    assert second["run"]["ours+"]["val_loss"] == run["ours+"]["val_loss"]
    assert (second["p_value"], second["mean_diff"]) == (first["p_value"], first["mean_diff"])


def test_a_variant_names_its_overrides_and_an_existing_out_is_kept(tmp_path, corpus, capsys):
    out = tmp_path / "try.json"
    out.write_text("my earlier verdict")
    assert main(["record", "try", "ours+lr=1e-3", "--against", "ours", "--corpus", corpus, "--out", str(out),
                 *QUICK]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "my earlier verdict"
    assert main(["record", "try", "ours+lr=1e-3", "--against", "ours", "--corpus", corpus, "--out", str(out),
                 "--force", *QUICK]) == 0
    result = json.loads(out.read_text())
    assert result["overrides"] == {"model": {}, "train": {"lr": 1e-3}} and result["candidate"] == "ours+lr=1e-3"


@pytest.mark.parametrize("recipe, message", [("recrod", "invalid recipe 'recrod'"),
                                             ("ours+learning_rate=1", "unknown field 'learning_rate'"),
                                             ("ours+lr", "expected FIELD=VALUE")])
def test_a_bad_recipe_is_named_before_anything_trains(recipe, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["record", "try", recipe])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
