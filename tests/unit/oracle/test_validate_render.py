"""The gold validation's markdown: where a check observed is a column of its own."""

from __future__ import annotations

from harness.oracle.validate import contract_evidence, kept_variant, render_markdown
from harness.records.tasks import ValidationReport, VariantResult


def test_the_reference_evidence_shows_where_each_check_observed_apart_from_what_it_measured(
) -> None:
    evidence = contract_evidence({"properties": {
        "oracle": "the judge's SGD loop",
        "observed_in": "judge,outside,candidate_report",
        "candidate_reports": "the class of what train() raised",
        "corroborated_by": "train.py --warmup-steps -1 exits non-zero",
        "max_abs_param_diff": "0.0",
        "run:cli": "a launcher's log, left out",
    }})
    reference = VariantResult(variant="reference", verdict="complete", outcomes={"c": "pass"},
                              expected_failing=[], mismatches=[], grade_folder="g",
                              evidence={"c": evidence})
    text = render_markdown(ValidationReport(task="t", ok=True, contracts=["c"],
                                            variants=[reference], not_run=[]))
    header = next(line for line in text.splitlines() if line.startswith("| contract | oracle"))
    assert header == "| contract | oracle | observed in | configurations | tolerance | measured |"
    row = next(line for line in text.splitlines()
               if line.startswith("| `c` |") and "oracle" not in line and "SGD" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["`c`", "the judge's SGD loop", "judge,outside,candidate_report", "", "",
                     "max_abs_param_diff=0.0"]


def test_a_kept_variant_without_an_outcome_for_a_check_added_since_is_a_mismatch() -> None:
    """A partial validation keeps the other variants' earlier grades; a check added since was
    never run on them, so the summary cannot pass on those grades."""
    old = VariantResult(variant="fault:x", verdict="incomplete",
                        outcomes={"public-tests": "pass", "hidden:t.py::test_a": "fail",
                                  "hidden:t.py::test_p[AMAM]": "pass"},
                        expected_failing=["hidden:t.py::test_a"], mismatches=[],
                        grade_folder="g")
    assert kept_variant(old, ["public-tests", "hidden:t.py::test_a",
                              "hidden:t.py::test_p"]) is old
    kept = kept_variant(old, ["public-tests", "hidden:t.py::test_a", "hidden:t.py::test_p",
                              "hidden:t.py::test_new"])
    assert kept.mismatches == [
        "fault:x: kept from an earlier validation that has no outcome for hidden:t.py::test_new "
        "(a check added since): grade it again (--variant fault:x)"]
    assert old.mismatches == []
