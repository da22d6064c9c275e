from __future__ import annotations

import pytest

from costaware.core.budget_listing import budgets_said, is_study_budget, listing_command, names_a_study
from costaware.core.budgets import Budget, Scope


def budget(label: str) -> Budget:
    scope, _, period = label.rpartition("/")
    return Budget.create(scope, period, "5")


CHURN, TEAM = budget("project=churn/month"), budget("team=ml/month")
STUDIES = [budget(f"project=flight-delays,study=budgeted_tuning-manual__{n}/total") for n in range(12)]


@pytest.mark.parametrize(
    ("budgets", "wanted", "said"),
    [
        ([], "project=churn2", "none"),
        ([CHURN, TEAM], "project=churn2", "'project=churn/month', 'team=ml/month'"),
        # Each run of a tuning DAG named after its run leaves a study budget: counted, not named.
        (
            [CHURN, *STUDIES, TEAM],
            "project=churn2",
            "'project=churn/month', 'team=ml/month'; and 12 study budgets "
            "(`costaware budget list --studies` lists them)",
        ),
        (
            STUDIES[:1],
            "project=churn2",
            "none but 1 study budget (`costaware budget list --studies` lists them)",
        ),
        # A scope naming a study asks for one: the study budgets are the ones it may mean.
        (
            [CHURN, STUDIES[0]],
            "project=flight-delays,study=typo",
            f"'{STUDIES[0].label}', 'project=churn/month'",
        ),
        (
            [CHURN, *STUDIES],
            "study=typo",  # the study budgets (same tag name) first
            ", ".join(f"'{b.label}'" for b in STUDIES[:5])
            + " and 8 more (`costaware budget list` and `costaware budget list --studies` list them)",
        ),
    ],
)
def test_a_refusal_names_the_budgets_that_may_be_meant_and_counts_study_budgets(
    budgets: list[Budget], wanted: str, said: str
) -> None:
    assert budgets_said(budgets, Scope.parse(wanted)) == said


def test_past_the_limit_budgets_sharing_a_tag_come_first_and_the_rest_are_counted() -> None:
    many = [budget(f"project=p{n}/month") for n in range(7)]
    said = budgets_said([*many, budget("team=ml/month")], Scope.parse("team=ml,project=x"))
    assert said == (
        "'team=ml/month', 'project=p0/month', 'project=p1/month', 'project=p2/month', 'project=p3/month' "
        "and 3 more (`costaware budget list` lists them)"
    )
    # Not folded where study budgets are the ones meant (those covering a scope with more tags).
    assert budgets_said(STUDIES, Scope.parse("project=flight-delays"), fold_studies=False).endswith(
        " and 7 more (`costaware budget list --studies` lists them)"
    )


def test_a_study_budget_is_one_with_a_study_tag() -> None:
    assert [is_study_budget(b) for b in (CHURN, STUDIES[0], budget("study=s1/month"))] == [False, True, True]
    assert listing_command([CHURN]) == "`costaware budget list` lists"
    assert (
        listing_command([STUDIES[0], CHURN])
        == "`costaware budget list` and `costaware budget list --studies` list"
    )


def test_past_the_limit_the_budgets_closest_to_a_mistyped_value_come_first() -> None:
    # Among eight project= budgets, the refusal of 'project=zurch' (delete, alerts set) named the first five
    # in ledger order and left out 'project=zurich', the one the typo meant.
    names = ["alpha", "beta", "gamma", "delta", "epsilon", "churn", "zeta", "zurich"]
    said = budgets_said([budget(f"project={n}/month") for n in names], Scope.parse("project=zurch"))
    assert said.startswith("'project=zurich/month', ")
    assert said.endswith(" and 3 more (`costaware budget list` lists them)")


@pytest.mark.parametrize(
    ("label", "folded"),
    [
        ("project=churn,study=s1/total", True),
        # A budgeted_search's own (search=<uuid4 hex[:8]>, total): one a killed search left is folded too.
        ("project=churn,search=3e772c5c/total", True),
        ("search=0123abcd/total", True),
        # A team's own search= budget: not the shape a search gives its id, or not for all time.
        ("project=churn,search=ranking/total", False),
        ("project=churn,search=3E772C5C/total", False),
        ("project=churn,search=3e772c5c/month", False),
        ("project=churn/total", False),
    ],
)
def test_which_budgets_a_listing_folds(label: str, folded: bool) -> None:
    assert is_study_budget(budget(label)) is folded


def test_the_fold_line_says_how_many_a_search_left() -> None:
    from costaware.core.budget_listing import folded_budgets_said

    assert folded_budgets_said(STUDIES[:2]) == "2 study budgets (a tuning study's own cap each)"
    searches = [budget("project=churn,search=3e772c5c/total")]
    assert folded_budgets_said(STUDIES[:1] + searches) == (
        "2 study budgets (a tuning study's own cap each; 1 left by a budgeted_search that did not end)"
    )


@pytest.mark.parametrize(
    ("scope", "asks"),
    [
        ("project=churn,study=nightly", True),
        ("search=3e772c5c", True),
        # A team's own search= scope asks about its own budget: the study budgets stay folded around it.
        ("search=ranking", False),
        ("project=churn,search=Ranking-2", False),
        ("project=churn", False),
    ],
)
def test_which_scopes_ask_about_the_folded_budgets(scope: str, asks: bool) -> None:
    assert names_a_study(Scope.parse(scope)) is asks
