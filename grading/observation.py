"""Where a hidden check's observation is made, declared on the check and kept in its evidence.

A probe's result and a run's logs are written by code running in the candidate's process: a
candidate can replace the writer and say whatever the check wants. So every hidden check
declares where the observations its verdict rests on are made::

    @observed_in(JUDGE, OUTSIDE)
    def test_cli_trains_the_ramp(...): ...

    @observed_in(JUDGE, CANDIDATE_REPORT, reports="the learning rates train() logs",
                 corroborated_by="the parameters equal the judge's own SGD loop's")
    def test_lr_follows_linear_warmup(...): ...

The kinds:

- ``judge``: what the candidate produced (a probe's tensors, a run's weights) is held to
  values the judge computes itself (a reference implementation, a replay of the specified
  training, the pristine baseline's run) on inputs it chose. Those values never leave the
  judge, so no report can match them without computing the specified behaviour.
- ``outside``: behaviour seen from outside every candidate process: how a run exited under the
  judge's launcher, which outputs its sealed job folder holds, the structure of what it
  exported (keys, shapes, dtypes), read by the judge's own loaders.
- ``candidate_report``: what code in a candidate process says about itself: a probe's word that
  a call raised or changed nothing, a dtype or device it names, two values it computed agreeing
  with each other, a learning rate or pattern a run logged. A forged report says what the check
  wants, so this kind never stands alone silently: the same check also observes as ``judge``
  or ``outside`` (``corroborated_by`` says what), or the declaration says ``uncorroborated``
  (why not yet) and docs/grading.md lists the check under what is left open. The declaration
  refuses anything else.

The judge's pytest plugin (``grading.judge_plugin``) copies the declaration into the check's
evidence (properties ``observed_in``, ``candidate_reports``, ``corroborated_by``,
``uncorroborated``); a check that declares nothing is recorded as ``undeclared``, and
``tests/unit/grading`` fails on any hidden check of the repository that does not declare.
"""

from __future__ import annotations

from typing import Any

import pytest

JUDGE = "judge"
OUTSIDE = "outside"
CANDIDATE_REPORT = "candidate_report"
KINDS = (JUDGE, OUTSIDE, CANDIDATE_REPORT)
CORROBORATING_KINDS = (JUDGE, OUTSIDE)

MARKER = "observed_in"
KINDS_PROPERTY = "observed_in"
REPORTS_PROPERTY = "candidate_reports"
CORROBORATION_PROPERTY = "corroborated_by"
UNCORROBORATED_PROPERTY = "uncorroborated"
UNDECLARED = "undeclared"


class DeclarationError(ValueError):
    """A check's ``observed_in`` declaration is malformed (raised when its module is read)."""


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def validate(kinds: tuple[Any, ...], reports: Any, corroborated_by: Any,
             uncorroborated: Any = None) -> None:
    """The rules of a declaration; :class:`DeclarationError` names the first one broken."""
    if not kinds:
        raise DeclarationError("observed_in needs at least one kind")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise DeclarationError(f"unknown observation kind(s) {unknown}; one of {KINDS}")
    if len(set(kinds)) != len(kinds):
        raise DeclarationError(f"observation kinds repeated: {kinds}")
    if CANDIDATE_REPORT not in kinds:
        if reports is not None or corroborated_by is not None or uncorroborated is not None:
            raise DeclarationError("reports=, corroborated_by= and uncorroborated= belong to "
                                   "candidate_report checks")
        return
    if not _text(reports):
        raise DeclarationError("a candidate_report check must say reports=...")
    if any(k in kinds for k in CORROBORATING_KINDS):
        if not _text(corroborated_by) or uncorroborated is not None:
            raise DeclarationError("a corroborated candidate_report check must say "
                                   "corroborated_by=... (and not uncorroborated=)")
        return
    # A report the same check does not corroborate is a known gap, said out loud: the check's
    # evidence and docs/grading.md ("What is left open") both name it.
    if not _text(uncorroborated) or corroborated_by is not None:
        raise DeclarationError(
            "a candidate_report never stands alone silently: declare the judge or outside "
            "observation of the same check that a forged report cannot pass, or say "
            "uncorroborated=... why there is none yet")


def observed_in(*kinds: str, reports: str | None = None, corroborated_by: str | None = None,
                uncorroborated: str | None = None) -> pytest.MarkDecorator:
    """The marker declaring where a check's observations are made (see the module's doc)."""
    validate(kinds, reports, corroborated_by, uncorroborated)
    ordered = tuple(k for k in KINDS if k in kinds)
    return pytest.mark.observed_in(*ordered, reports=reports, corroborated_by=corroborated_by,
                                   uncorroborated=uncorroborated)


def evidence_properties(item: pytest.Item) -> list[tuple[str, str]]:
    """The properties a check's declaration puts into its evidence (``undeclared`` when it has
    none, or when its marker was not made by :func:`observed_in`)."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return [(KINDS_PROPERTY, UNDECLARED)]
    reports = marker.kwargs.get("reports")
    corroborated_by = marker.kwargs.get("corroborated_by")
    uncorroborated = marker.kwargs.get("uncorroborated")
    try:
        validate(tuple(marker.args), reports, corroborated_by, uncorroborated)
    except DeclarationError as exc:
        return [(KINDS_PROPERTY, f"{UNDECLARED}: {exc}")]
    props = [(KINDS_PROPERTY, ",".join(marker.args))]
    if reports is not None:
        props.append((REPORTS_PROPERTY, reports))
    if corroborated_by is not None:
        props.append((CORROBORATION_PROPERTY, corroborated_by))
    if uncorroborated is not None:
        props.append((UNCORROBORATED_PROPERTY, uncorroborated))
    return props
