"""The regression gate's per-message cases (benchmarks/cases.py) under
pytest-benchmark: `./dev bench` runs this file and compares the medians
with the committed baseline (benchmarks/gate.py)."""
import pytest

from benchmarks.cases import CASES, CALLGRIND_N


@pytest.mark.parametrize("case", list(CASES))
def test_case(per_message, tmp_path, case):
    run = CASES[case](tmp_path)
    per_message(run, n=CALLGRIND_N.get(case, 10_000))
