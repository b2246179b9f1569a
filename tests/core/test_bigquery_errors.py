"""BigQuery's refusals said by their cause, through the real client and warehouse: each names the remedy
that works — an admin's grant, a column to leave out, a location setting, a quota that resets tomorrow,
a query that needs less memory — where one generic sentence sent the model to try other tables or to
retry what could not succeed."""

from __future__ import annotations

import pytest

from core.bigquery_errors import describe_error
from tests.core import bigquery_parts
from tests.core.bigquery_parts import ORDERS, ORDERS_SCHEMA
from tests.fakes.bigquery_api import Answer, qctx

fake_bq, parts = bigquery_parts.fake_bq, bigquery_parts.parts  # the shared fixtures

JOBS_CREATE = (
    "Access Denied: Project bill: User does not have bigquery.jobs.create permission in project bill."
)
POLICY_TAG = (
    'Access Denied: BigQuery BigQuery: User does not have permission to access policy tag "pii : email" '
    "on columns bill.shop.orders.email, bill.shop.orders.phone."
)
LOCATION = "Not found: Dataset bill:shop was not found in location US"
DAILY = (
    "Custom quota exceeded: Your usage exceeded the custom quota for QueryUsagePerDay, which is set by "
    "your administrator. For more information, see https://cloud.google.com/bigquery/troubleshooting-errors"
)
MEMORY = (
    "Resources exceeded during query execution: The query could not be executed in the allotted memory. "
    "Peak usage: 160% of limit."
)


@pytest.mark.parametrize(
    ("answer", "says", "never"),
    [
        pytest.param(
            Answer(error=(403, "accessDenied", JOBS_CREATE)),
            ["may not run queries in project bill", "an admin must grant it roles/bigquery.jobUser"],
            ["list_tables", "another table"],
            id="no bigquery.jobs.create on the billing project",
        ),
        pytest.param(
            Answer(error=(403, "accessDenied", POLICY_TAG)),
            ["columns email, phone", "SELECT * EXCEPT(email, phone)"],
            ["another table"],
            id="column-level security",
        ),
        pytest.param(
            Answer(error=(404, "notFound", LOCATION)),
            ["location US", "an admin must set DATATHREAD_BIGQUERY_LOCATION"],
            ["Check the name with list_tables"],
            id="the location setting is not the dataset's",
        ),
        pytest.param(
            Answer(ORDERS_SCHEMA, [], run_error=(403, "quotaExceeded", DAILY)),
            ["daily quota", "resets the next day", "only an admin can raise it"],
            ["Wait a little"],
            id="a daily custom quota",
        ),
        pytest.param(
            Answer(ORDERS_SCHEMA, [], referenced=["bill.shop.orders"], failed=("resourcesExceeded", MEMORY)),
            ["ran out of memory", "fewer GROUP BY keys", "no ORDER BY over the whole result"],
            ["Try again shortly"],
            id="a job DONE with errorResult resourcesExceeded",
        ),
    ],
)
async def test_a_refusal_is_said_with_the_remedy_that_works(parts, fake_bq, answer, says, never):
    warehouse, _, store, _ = parts
    fake_bq.on_query(ORDERS, answer)
    result = await warehouse.query(ORDERS, None, qctx(store))
    assert not result.ok
    for words in says:
        assert words in result.error, result.error
    for words in never:
        assert words not in result.error, result.error


def test_an_admin_is_never_told_to_call_a_tool():
    """`datathread doctor` said "use another table from list_tables" to the person running it."""
    from google.api_core import exceptions as gexc

    plain = gexc.Forbidden("Access Denied: Table bill:shop.orders", errors=[{"reason": "accessDenied"}])
    for exc in (plain, gexc.NotFound("Not found: Dataset bill:gone", errors=[{"reason": "notFound"}])):
        words = describe_error(exc, for_admin=True)
        assert "list_tables" not in words and "describe_table" not in words, words
    assert "roles/bigquery.jobUser" in describe_error(plain, for_admin=True)
    assert "list_tables" in describe_error(plain)  # the model still gets its way forward
