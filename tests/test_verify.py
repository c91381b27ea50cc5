"""seeder.verify without processes: the contract, metrics parsing, statistics, verdicts, reports."""

from __future__ import annotations

import copy
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optional import need_verify

need_verify(figures=False)
from scipy import stats as sst  # noqa: E402

from seeder.verify import Contract, Metrics, parse_metrics, read_metrics  # noqa: E402
from seeder.verify import _stats as stats  # noqa: E402
from seeder.verify._analysis import analyze_compare, analyze_verify  # noqa: E402
from seeder.verify._report import markdown, table  # noqa: E402
from seeder.verify._session import MARKER, OutputDirError, prepare_out, write_json  # noqa: E402


def m(values, start=0, per_epoch=4, digest=None):
    keys = [(start + i,) for i in range(len(values))]
    return Metrics(keys, np.asarray(values, dtype=float), [k[0] // per_epoch for k in keys], digest)


# --- contract
# --------------------------------------------------------------------------------------------------


def test_default_contract_is_the_train_py_contract():
    c = Contract()
    assert c.args(
        seed=7, epochs=4, ckpt_dir="/d x", resume=True, stop_after_epochs=2, metrics="/m.jsonl"
    ) == [
        "--seed",
        "7",
        "--epochs",
        "4",
        "--ckpt-dir",
        "/d x",
        "--resume",
        "--stop-after-epochs",
        "2",
        "--metrics",
        "/m.jsonl",
    ]
    assert c.args(stop_after_steps=9) == ["--stop-after-steps", "9"]
    assert c.env("/m.jsonl") == {"SEEDER_METRICS": "/m.jsonl"}
    assert c.args() == []


def test_contract_overrides_and_errors():
    c = Contract().with_overrides(
        {"seed": "--random-seed={seed}", "metrics": "", "loss_keys": "data.loss, loss"}
    )
    assert c.args(seed=3, metrics="m") == ["--random-seed=3"]  # metrics only through the env var
    assert c.loss_keys == ("data.loss", "loss")
    with pytest.raises(ValueError, match="unknown contract field 'sed'"):
        Contract().with_overrides({"sed": "x"})
    with pytest.raises(ValueError, match="placeholders"):
        Contract(seed="--seed {master}")
    with pytest.raises(TypeError, match="loss_keys"):
        Contract(loss_keys="loss")
    with pytest.raises(ValueError, match="resume.*template is empty"):
        Contract(resume="").args(ckpt_dir="d", resume=True)


def test_parse_json_lines_dllogger_and_digest():
    lines = [
        '{"step": 0, "epoch": 0, "loss": 2.0}',
        "some log line",
        '{"step": 1, "epoch": 0, "loss": 1.5}',
        'DLLL {"type": "LOG", "step": [1, 5], "data": {"train_loss": 0.75}}',
        'DLL {"step": "PARAMETER", "data": {"lr": 0.1}}',
        'DLLL {"step": [], "data": {"train_loss": 9}}',
        '{"digest": "abc", "epoch": 2, "step": 1}',
    ]
    got = parse_metrics(lines)
    assert got.keys == [(0,), (1,), (1, 5)]
    assert got.losses.tolist() == [2.0, 1.5, 0.75]
    assert got.epochs == [0, 0, 1]
    assert got.digest == "abc"


def test_parse_float_round_trip_is_exact():
    x = 0.1 + 0.2  # not representable briefly; json repr must round-trip bit for bit
    got = parse_metrics([json.dumps({"step": 0, "loss": x})])
    assert got.losses[0] == x


def test_parse_rejects_duplicate_steps_and_strict_junk():
    with pytest.raises(ValueError, match="step 3 already logged on line 1"):
        parse_metrics(['{"step": 3, "loss": 1}', '{"step": 3, "loss": 1}'])
    with pytest.raises(ValueError, match=r"m.jsonl:2: not a JSON object"):
        parse_metrics(['{"step": 3, "loss": 1}', "oops"], source="m.jsonl", strict=True)
    with pytest.raises(ValueError, match="invalid JSON"):
        parse_metrics(['{"step": 3,'], strict=True)


def test_read_metrics_falls_back_to_the_log(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text('hello\nDLLL {"step": [0, 0], "data": {"train_loss": 1.0}}\nDIGEST ff00\n')
    got = read_metrics(tmp_path / "missing.jsonl", log)
    assert (
        got.keys == [(0, 0)] and got.digest == "ff00"
    )  # the DIGEST line of the log the losses came from
    (tmp_path / "m.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    assert read_metrics(tmp_path / "m.jsonl", log).digest == "ff00"
    with pytest.raises(
        ValueError, match="no per-step values found in .*missing.jsonl or .*empty.txt"
    ):
        (tmp_path / "empty.txt").write_text("nothing\n")
        read_metrics(tmp_path / "missing.jsonl", tmp_path / "empty.txt")


def test_read_metrics_takes_seeders_digest_when_the_script_logs_losses_and_no_digest(tmp_path):
    """The losses are the script's, the final digest of weights and optimizer seeder's: both are
    compared."""
    (tmp_path / "m.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    steps = tmp_path / "steps.jsonl"
    steps.write_text(
        '{"step": 1, "epoch": 0, "loss": 7.0, "value": "sum of squared parameters"}\n{"digest": '
        '"ab12"}\n'
    )
    got = read_metrics(tmp_path / "m.jsonl", tmp_path / "log.txt", steps_file=steps)
    assert got.losses.tolist() == [1.0] and got.quantity == "loss" and got.digest == "ab12"
    (tmp_path / "m.jsonl").write_text('{"step": 1, "loss": 1.0}\n{"digest": "own"}\n')
    assert (
        read_metrics(tmp_path / "m.jsonl", None, steps_file=steps).digest == "own"
    )  # the script's own first


# --- statistics
# ------------------------------------------------------------------------------------------------


def test_paired_interval_textbook_value():
    # d = 1..5: mean 3, sd sqrt(2.5), se 0.70711, t(0.975, 4) = 2.77645 -> 3 -+ 1.96324
    lo, hi = stats.paired_interval(np.arange(1.0, 6.0), 0.95)
    assert lo == pytest.approx(1.03676, abs=1e-5) and hi == pytest.approx(4.96324, abs=1e-5)
    assert stats.paired_interval(np.array([0.25, 0.25, 0.25]), 0.99) == (0.25, 0.25)
    with pytest.raises(ValueError, match="at least 2 pairs"):
        stats.paired_interval(np.array([1.0]), 0.95)
    with pytest.raises(ValueError, match="level"):
        stats.paired_interval(np.array([1.0, 2.0]), 95)


def test_sample_var_is_exactly_zero_for_equal_values():
    v = np.full(7, 0.1 + 0.2)
    assert float(stats.sample_var(v)) == 0.0
    assert stats.step_spread(np.array([[0.3, 1.0], [0.3, 2.0]])).tolist() == [0.0, math.sqrt(0.5)]


def test_variance_test():
    t = stats.variance_test(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0]))
    assert t["ratio"] == 0.0 and t["p_value"] == 0.0
    t = stats.variance_test(np.array([1.0, 2.0, 3.0]), np.array([5.0, 6.0, 7.0]))
    assert t["ratio"] == 1.0 and t["p_value"] == pytest.approx(0.5)
    t = stats.variance_test(np.array([1.0, 2.0]), np.array([4.0, 4.0]))
    assert math.isnan(t["ratio"]) and math.isnan(t["p_value"])
    with pytest.raises(ValueError, match="at least 2 runs"):
        stats.variance_test(np.array([1.0]), np.array([1.0, 2.0]))


@settings(max_examples=40, deadline=None)
@given(
    sd_a=st.floats(0.01, 10),
    sd_b=st.floats(0.0, 10),
    hw=st.floats(0.01, 5),
    level=st.sampled_from([0.9, 0.95, 0.99]),
)
def test_unpaired_runs_needed_is_the_smallest_sufficient_m(sd_a, sd_b, hw, level):
    m = stats.unpaired_runs_needed(sd_a, sd_b, hw, level)
    var = sd_a**2 + sd_b**2

    def width(k):
        df = var**2 / ((sd_a**4 + sd_b**4) / (k - 1))
        return sst.t.ppf(0.5 + level / 2, df) * math.sqrt(var / k)

    assert m >= 2 and width(m) <= hw
    assert m == 2 or width(m - 1) > hw


def test_residual_correlation_sees_shared_noise_not_the_trend():
    rng = np.random.default_rng(0)
    trend = np.linspace(3, 0, 200)
    shared = rng.normal(size=200) * 0.1
    same = np.stack([trend + shared, trend + shared + rng.normal(size=200) * 0.01])
    indep = np.stack([trend + rng.normal(size=200) * 0.1 for _ in range(4)])
    assert stats.residual_correlation(same) > 0.9
    assert abs(stats.residual_correlation(indep)) < 0.4
    assert np.corrcoef(indep[0], indep[1])[0, 1] > 0.9  # raw curves correlate through the trend


# --- verdicts
# --------------------------------------------------------------------------------------------------

BASE = [4.0, 3.0, 2.5, 2.0, 1.6, 1.3, 1.1, 1.0]


def runs_ok(repeats=3):
    rng = np.random.default_rng(1)
    return {
        "full": [m(BASE, digest="d1") for _ in range(repeats)],
        "half": [m(BASE[:4]) for _ in range(repeats)],
        "resume": [m(BASE[4:], start=4, digest="d1") for _ in range(repeats)],
        "unseeded": [
            m(np.array(BASE) + rng.normal(0, 0.2, 8), digest=f"u{i}") for i in range(repeats)
        ],
    }


def test_verify_pass():
    rep = analyze_verify(with_mid(runs_ok()))
    assert rep["verdict"] == "PASS" and rep["reasons"] == []
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["reproducible"]["details"]["bitwise"] and checks["resume"]["details"]["bitwise"]
    assert checks["variance"]["details"]["p_value"] == 0.0
    assert rep["per_step"]["std_seeded"] == [0.0] * 8
    assert rep["per_step"]["correlation"]["full_vs_resumed"] == pytest.approx(1.0)


def test_records_that_name_their_value_are_reported_as_that_not_as_loss():
    lines = [
        json.dumps({"step": i, "epoch": 0, "loss": 1.0 + i, "value": "sum of squared parameters"})
        for i in range(3)
    ]
    parsed = parse_metrics(lines)
    assert (
        parsed.quantity == "sum of squared parameters"
        and parse_metrics(['{"step": 0, "loss": 1}']).quantity == "loss"
    )
    runs = runs_ok()
    for ms in runs.values():
        for one in ms:
            one.quantity = "sum of squared parameters"
    variance = {c["name"]: c for c in analyze_verify(runs)["checks"]}["variance"]
    assert variance["summary"].startswith("last-epoch sum of squared parameters: seeded std")
    assert "loss" not in variance["summary"] + variance["details"]["statistic"]


def test_verify_broken_resume_names_the_step_and_difference():
    runs = runs_ok()
    runs["resume"] = [
        m(np.array(BASE[4:]) + [0, 0.5, 0, 0], start=4, digest="d2") for _ in range(3)
    ]
    rep = analyze_verify(runs)
    assert rep["verdict"] == "FAIL"
    checks = {c["name"]: c["status"] for c in rep["checks"]}
    assert checks == {
        "reproducible": "PASS",
        "resume": "FAIL",
        "resume-mid-epoch": "SKIP",
        "variance": "PASS",
    }
    assert len(rep["reasons"]) == 1  # grouped over repeats
    reason = rep["reasons"][0]
    assert (
        "resumed run (3) differs" in reason
        and "from step 5" in reason
        and "0.5" in reason
        and "repeat 1, repeat 2" in reason
    )
    assert "the checkpoint does not restore everything" in reason  # no trace: the generic cause


def with_mid(runs, mid_stop=6, resumed=None):
    """``runs`` plus a mid-epoch stop after ``mid_stop`` steps (epochs of 4 steps) and its resumed
    run."""
    runs["mid"] = [m(BASE[:mid_stop]) for _ in range(3)]
    runs["resume-mid"] = resumed or [
        m(BASE[mid_stop:], start=mid_stop, digest="d1") for _ in range(3)
    ]
    return runs


def test_verify_mid_epoch_check_reports_where_it_stopped():
    rep = analyze_verify(with_mid(runs_ok()))
    checks = {c["name"]: c for c in rep["checks"]}
    assert rep["verdict"] == "PASS" and checks["resume-mid-epoch"]["status"] == "PASS"
    assert checks["resume"]["summary"].startswith("stopped at the end of epoch 0 (step 3)")
    assert checks["resume-mid-epoch"]["summary"].startswith(
        "stopped mid-epoch at step 5 (2 of 4 steps into epoch 1)"
    )
    stop = checks["resume-mid-epoch"]["details"]["repeats"][0]["stopped_at"]
    assert stop == {
        "step": [5],
        "epoch": 1,
        "into_epoch": 2,
        "epoch_steps": 4,
        "epoch_boundary": False,
        "text": "mid-epoch at step 5 (2 of 4 steps into epoch 1)",
    }
    # an explicit stop step that falls on an epoch boundary is said to be one
    boundary = next(
        c
        for c in analyze_verify(with_mid(runs_ok(), mid_stop=4))["checks"]
        if c["name"] == "resume-mid-epoch"
    )
    assert (
        boundary["status"] == "PASS" and "an epoch boundary, not mid-epoch" in boundary["summary"]
    )


def test_verify_mid_epoch_failure_uses_the_diagnosis():
    broken = [m(np.array(BASE[6:]) + [0.25, 0], start=6, digest="d2") for _ in range(3)]
    asked = []

    def diagnose(check, repeat):
        asked.append((check, repeat))
        return {"state": "torch", "message": "torch's global RNG differs right after the resume"}

    rep = analyze_verify(with_mid(runs_ok(), resumed=broken), diagnose=diagnose)
    checks = {c["name"]: c for c in rep["checks"]}
    assert rep["verdict"] == "FAIL" and checks["resume"]["status"] == "PASS"
    assert checks["resume-mid-epoch"]["status"] == "FAIL" and asked == [
        ("resume-mid-epoch", r) for r in range(3)
    ]
    assert rep["reasons"] == [
        "mid-epoch stop, repeat 0: the resumed run (3b) differs from the uninterrupted run (1) "
        "from step 6 on (largest |loss difference| 0.25; resumed at step 6): torch's global RNG "
        "differs right after the resume (also repeat 1, repeat 2)"
    ]
    assert checks["resume-mid-epoch"]["details"]["repeats"][0]["diagnosis"]["state"] == "torch"


def test_a_skipped_check_makes_the_verdict_incomplete_unless_allowed():
    runs = runs_ok()
    del runs["half"], runs["resume"]
    rep = analyze_verify(with_mid(runs), skipped={"resume": "X = 1 epoch"})
    checks = {c["name"]: c for c in rep["checks"]}
    assert (
        rep["verdict"] == "INCOMPLETE"
        and checks["resume"]["status"] == "SKIP"
        and rep["skipped"] == ["resume"]
    )
    assert checks["resume"]["summary"] == "not tested: X = 1 epoch"
    assert rep["reasons"] == [
        "resume was not tested: X = 1 epoch (or pass --allow-skip to accept a verdict without it)"
    ]
    for allowed in (True, ["resume"]):
        rep = analyze_verify(with_mid(runs), skipped={"resume": "X = 1 epoch"}, allow_skip=allowed)
        assert rep["verdict"] == "PASS" and rep["reasons"] == [] and rep["skipped"] == ["resume"]
    assert (
        analyze_verify(with_mid(runs), allow_skip=["resume-mid-epoch"])["verdict"] == "INCOMPLETE"
    )
    failing = with_mid(runs)
    failing["unseeded"] = [m(BASE) for _ in range(3)]
    assert analyze_verify(failing)["verdict"] == "FAIL"  # a FAIL outranks a SKIP
    assert "resume  " in table({"kind": "verify", **rep}) and "SKIP" in table(
        {"kind": "verify", **rep}
    )
    with pytest.raises(ValueError, match=r"lacks the kinds \['resume-mid'\]"):
        analyze_verify({**runs_ok(), "mid": runs_ok()["half"]})


def test_verify_resume_that_starts_over():
    runs = runs_ok()
    runs["resume"] = [
        m(BASE, digest="d1") for _ in range(3)
    ]  # ignored the checkpoint, redid every step
    rep = analyze_verify(runs)
    assert rep["verdict"] == "FAIL"
    assert "did not continue from the checkpoint" in rep["reasons"][0]


def test_verify_missing_steps_and_digest_mismatch():
    runs = runs_ok()
    runs["resume"] = [m(BASE[5:], start=5, digest="d1") for _ in range(3)]
    assert "logged by neither (2) nor (3)" in analyze_verify(runs)["reasons"][0]
    runs = runs_ok()
    runs["resume"] = [m(BASE[4:], start=4, digest="zz") for _ in range(3)]
    assert "different model digest" in analyze_verify(runs)["reasons"][0]
    # with a tolerance, digests (bitwise by nature) are reported but not voted on
    assert analyze_verify(runs, atol=1e-9, allow_skip=True)["verdict"] == "PASS"


def test_verify_stopped_run_with_steps_the_full_run_lacks_is_a_fail_not_a_crash():
    # Run (2) logs a step run (1) never logged (and, once, nothing at all): a FAIL naming it.
    runs = runs_ok()
    runs["half"] = [Metrics([(0,), (1,), (99,)], np.array(BASE[:3]), [0, 0, 0]) for _ in range(3)]
    rep = analyze_verify(runs)
    assert rep["verdict"] == "FAIL"
    assert "logged steps the uninterrupted run (1) does not have (first 99)" in rep["reasons"][0]
    runs["half"] = [m([]) for _ in range(3)]
    rep = analyze_verify(runs)
    assert rep["verdict"] == "FAIL"
    assert "the stopped run (2) logged no steps" in rep["reasons"][0]


def test_verify_seeded_spread_not_smaller():
    rng = np.random.default_rng(2)
    runs = runs_ok(4)
    runs["full"] = [m(np.array(BASE) + rng.normal(0, 0.2, 8)) for _ in range(4)]
    rep = analyze_verify(runs)
    var = next(c for c in rep["checks"] if c["name"] == "variance")
    assert var["status"] == "FAIL" and var["details"]["p_value"] >= 0.05
    assert any("not less spread than unseeded" in r for r in rep["reasons"])
    assert any("same seed does not give the same run" in r for r in rep["reasons"])


def test_verify_identical_unseeded_runs():
    runs = runs_ok()
    runs["unseeded"] = [m(BASE) for _ in range(3)]
    rep = analyze_verify(runs)
    assert rep["verdict"] == "FAIL"
    assert "unseeded runs (4) are identical" in rep["reasons"][0]


def test_verify_tolerance():
    runs = runs_ok()
    runs["full"][1] = m(np.array(BASE) + 1e-12, digest="d1")
    assert analyze_verify(runs)["verdict"] == "FAIL"
    rep = analyze_verify(runs, atol=1e-9, allow_skip=["resume-mid-epoch"])
    assert rep["verdict"] == "PASS"
    assert "within 1e-09" in rep["checks"][0]["summary"]


def test_verify_bad_input_changes_nothing():
    runs = runs_ok()
    before = copy.deepcopy(runs)
    for kwargs, match in (({"atol": -1}, "atol"), ({"alpha": 1.5}, "alpha")):
        with pytest.raises(ValueError, match=match):
            analyze_verify(runs, **kwargs)
    with pytest.raises(ValueError, match="at least 2"):
        analyze_verify({k: v[:1] for k, v in runs.items()})
    with pytest.raises(ValueError, match="lacks the kinds"):
        analyze_verify({"full": runs["full"]})
    for k in runs:
        for a, b in zip(runs[k], before[k]):
            assert a.keys == b.keys and a.losses.tolist() == b.losses.tolist()


def test_compare_identical_and_shifted():
    rng = np.random.default_rng(3)
    a = [m(np.array(BASE) + rng.normal(0, 0.3, 8)) for _ in range(5)]
    same = analyze_compare(a, [m(x.losses) for x in a])
    assert (
        not same["differs"]
        and same["intervals"]["0.95"]["low"] == same["intervals"]["0.95"]["high"] == 0.0
    )
    noisy_shift = [m(x.losses + 0.05 + rng.normal(0, 0.005, 8)) for x in a]
    rep = analyze_compare(a, noisy_shift)
    assert rep["differs"] and rep["intervals"]["0.95"]["low"] > 0
    # the spread across seeds (0.3) dwarfs the paired spread (0.005): unpaired runs need many more
    # runs
    assert rep["intervals"]["0.95"]["unpaired_runs_needed"] > 100
    assert rep["variance_reduction"] > 100
    with pytest.raises(ValueError, match="same number of runs"):
        analyze_compare(a, a[:3])


# --- report and output directory
# -------------------------------------------------------------------------------


def test_table_and_markdown_explain_the_verdict(tmp_path):
    rep = analyze_verify(with_mid(runs_ok()))
    rep.update(
        kind="verify",
        config={
            "command": ["python", "t.py"],
            "seed": 1,
            "repeats": 3,
            "epochs": 2,
            "stop_after_steps": None,
            "atol": 0.0,
            "alpha": 0.05,
        },
        runs=[
            {
                "name": "full-0",
                "status": "ok",
                "steps": 8,
                "duration_s": 1.0,
                "digest": "d1",
                "log": "runs/full-0/log.txt",
            }
        ],
        figures=[str(tmp_path / "overlay.png")],
    )
    text = table(rep)
    assert re.search(r"reproducible +PASS", text) and text.rstrip().endswith("verdict: PASS")
    md = markdown(rep, tmp_path)
    for needle in (
        "# seeder verify: PASS",
        "one-sided F test",
        "p < alpha = 0.05",
        "![overlay](overlay.png)",
        "| full-0 | ok | not shown | 8 |",
    ):
        assert needle in md


def test_prepare_out_refuses_foreign_directories(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(OutputDirError, match="not written by seeder verify"):
        prepare_out(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me" and not (tmp_path / MARKER).exists()
    out = prepare_out(tmp_path / "v")
    (out / "runs" / "old").mkdir(parents=True)
    (out / "report.json").write_text("{}")
    prepare_out(out)
    assert (
        not (out / "runs").exists()
        and not (out / "report.json").exists()
        and (out / MARKER).is_file()
    )


def test_write_json_is_strict(tmp_path):
    write_json(tmp_path / "r.json", {"a": math.nan, "b": [math.inf, 1.5]})
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": None, "b": ["inf", 1.5]}


def test_progress_without_tqdm_prints_one_line_per_run(monkeypatch, capsys, tmp_path):
    import sys

    from seeder.verify._runner import RunResult, _Progress

    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now raises ImportError
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = _Progress(2, True, "runs")
    assert bar.bar is None
    bar.update(RunResult("full-0", "ok", 0, 1.25, tmp_path / "log.txt"), running=["half-0"])
    bar.close()
    assert capsys.readouterr().err == "seeder: [1/2] full-0 ok (1.2s)\n"


def test_bad_config_raises_before_touching_the_output_directory(tmp_path):
    from seeder.verify import CompareConfig, VerifyConfig, compare, verify

    out = tmp_path / "v"
    for cfg, match in (
        (VerifyConfig(command=["python", "t.py"], out=out, repeats=1), "repeats must be >= 2"),
        (VerifyConfig(command=["python", "t.py"], out=out, seed=2**76), "seed must be at most"),
        (VerifyConfig(command=[], out=out), "command must be a non-empty list"),
        (VerifyConfig(command=["python"], out=out, jobs=0), "jobs must be an integer >= 1"),
        (VerifyConfig(command=["python"], out=out, alpha=0), "alpha"),
        (
            VerifyConfig(command=["python"], out=out, stop_after_steps=3, mid_epoch=False),
            "cannot go with mid_epoch=False",
        ),
    ):
        with pytest.raises(ValueError, match=match):
            verify(cfg)
    with pytest.raises(ValueError, match="runs must be >= 2"):
        compare(CompareConfig(command=["python"], out=out, runs=1))
    assert not out.exists()


def test_summary_value_is_the_last_epoch_mean():
    assert stats.summary_value(m([4.0, 3.0, 2.0, 1.0, 1.0, 0.5], per_epoch=4)) == 0.75
    no_epochs = Metrics([(i,) for i in range(8)], np.arange(8.0), [None] * 8)
    assert stats.summary_value(no_epochs) == 6.5  # the last quarter of the steps


# --- the plan: how many runs
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "contract",
    [Contract(), Contract(stop_after_epochs="", stop_after_steps="", resume="")],
    ids=["flags", "seeder-stops"],
)
def test_resume_repeats_runs_fewer_stopped_and_resumed_runs(tmp_path, contract):
    """--resume-repeats N: the two resume checks run N repeats; (1) and (4) keep --repeats; default
    unchanged."""
    from collections import Counter

    from seeder._cli import build_parser
    from seeder.verify import VerifyConfig
    from seeder.verify._plan import plan_verify

    def kinds(**kw):
        cfg = VerifyConfig(
            command=["python", "train.py"],
            out=tmp_path,
            epochs=4,
            repeats=3,
            contract=contract,
            **kw,
        )
        cfg.validate()
        specs = plan_verify(cfg, tmp_path)
        assert len({s.name for s in specs}) == len(specs)
        return Counter(s.info["kind"] for s in specs), {s.name for s in specs}

    every = {"full": 3, "unseeded": 3, "half": 3, "resume": 3, "mid": 3, "resume-mid": 3}
    assert kinds()[0] == kinds(resume_repeats=3)[0] == every  # 18 runs
    fewer, names = kinds(resume_repeats=1)
    assert fewer == {
        "full": 3,
        "unseeded": 3,
        "half": 1,
        "resume": 1,
        "mid": 1,
        "resume-mid": 1,
    }  # 10 runs
    assert {"half-0", "resume-0", "mid-0", "resume-mid-0"} <= names and not names & {
        "half-1",
        "resume-mid-2",
    }
    assert sum(kinds(resume_repeats=2, mid_epoch=False)[0].values()) == 3 * 2 + 2 * 2
    for bad in (0, 4, 1.5):
        with pytest.raises(ValueError, match="resume_repeats must be an integer from 1 to repeats"):
            VerifyConfig(command=["python"], out=tmp_path, repeats=3, resume_repeats=bad).validate()
    args = build_parser().parse_args(
        ["verify", "--repeats", "3", "--resume-repeats", "1", "--", "python", "t.py"]
    )
    assert args.resume_repeats == 1
    assert build_parser().parse_args(["verify"]).resume_repeats is None


def test_resume_checks_with_fewer_repeats_than_the_seeded_runs():
    runs = runs_ok()
    fewer = {**runs, "half": runs["half"][:1], "resume": runs["resume"][:1]}
    rep = analyze_verify(fewer, allow_skip=True)
    resume = next(c for c in rep["checks"] if c["name"] == "resume")
    assert rep["verdict"] == "PASS" and [r["repeat"] for r in resume["details"]["repeats"]] == [0]
    broken = {**fewer, "resume": [m(np.array(BASE[4:]) + 0.5, start=4, digest="d1")]}
    assert analyze_verify(broken)["verdict"] == "FAIL"
    with pytest.raises(ValueError, match="same number of repeats"):
        analyze_verify({**runs, "half": runs["half"][:1]})
