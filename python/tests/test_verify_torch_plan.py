"""The torch suite's cases against rankwise's own: for N = 1 to 8, rows
built by `rankwise.verify_torch` from its own closed forms (each output
taken to be exactly what the Python side expects, as a correct backend
gives) are checked by `rankwise summarize`, which re-derives every row from
the Rust suite. A Python expectation, variant, pointer relation, dtype or
count that differs from the Rust suite's fails the run there. Needs no
torch; run with the Python that has the wheel installed:

    python python/tests/test_verify_torch_plan.py
"""

import json
import os
import subprocess
import sys
import tempfile

from rankwise import executable, verify_torch as vt


def simulated(case, n):
    """The case with a run that gives exactly what the Python side expects."""
    want = case.expect()

    def run():
        if want == vt.REJECTED_ROOT:
            raise ValueError(f"Invalid root rank {n}: not a rank of the group")
        return want, "simulated"

    case.run = run
    return case


def write_run(root, n, tamper=None):
    run_id = "20260101T000000Z"
    plan0 = vt.cases(n, 0)
    for me in range(n):
        rows = [vt.judge(simulated(c, n), n, me, run_id, "simulated", lambda: None)
                for c in vt.cases(n, me)]
        if tamper and me == tamper[0]:
            rows[tamper[1]]["expected"] = rows[tamper[1]]["actual"] = "[12345]"
        vt.write_rows(os.path.join(root, "raw", vt.LAYER, f"rank{me}.csv"), rows)
    manifest = {
        "tool": "test", "version": "0", "run_id": run_id, "suite": vt.SUITE, "ranks": n,
        "engine": vt.ENGINE,
        "layers": [{"name": vt.LAYER, "rows_per_rank": len(plan0), "rows": n * len(plan0),
                    "records": len(plan0)}],
        "adaptations": [],
    }
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def summarize(root):
    return subprocess.run([executable(), "summarize", root], capture_output=True, text=True)


def test_every_rank_count_agrees_with_the_rust_suite():
    for n in range(1, 9):
        with tempfile.TemporaryDirectory() as d:
            write_run(d, n)
            r = summarize(d)
            assert r.returncode == 0, f"N={n}\n{r.stdout}\n{r.stderr}"
            assert "framework" in r.stdout and "all PASS" in r.stdout, r.stdout
            assert f"engine {vt.ENGINE}" in r.stdout, r.stdout


def test_a_wrong_expectation_fails_the_run():
    with tempfile.TemporaryDirectory() as d:
        write_run(d, 4, tamper=(2, 0))
        r = summarize(d)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "raw/framework/rank2.csv line 2: AllReduce / SUM/int64: expected column [12345]" in r.stderr, r.stderr


def test_values_are_written_as_the_records_write_them():
    cases = [(3, "3"), (-7, "-7"), (3.0, "3"), (1.75, "1.75"), (-0.0, "-0"), (1e-07, "0.0000001"),
             (1e20, "100000000000000000000"), (0.1, "0.1"), (float("inf"), "inf"),
             (float("-inf"), "-inf"), (float("nan"), "nan"), (True, "1")]
    for value, text in cases:
        assert vt.fmt_value(value) == text, (value, vt.fmt_value(value), text)
    assert vt.fmt_values([]) == "[]"
    assert vt.fmt_values([1, 2.5]) == "[1, 2.5]"


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    failed = 0
    for t in tests:
        try:
            t()
            print(f"ok {t.__name__}")
        except AssertionError as e:
            failed += 1
            print(f"FAILED {t.__name__}: {e}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
