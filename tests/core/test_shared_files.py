"""One message's files share DATATHREAD_SHARED_FILES_MB (`FilesBudget`): each file's claim grows by
the size a platform states and by the bytes as they arrive; a file that would pass what is left is
refused in one sentence and holds nothing, and a file refused for any reason gives back what it held."""

from __future__ import annotations

from core.events import SharedFile
from core.shared_files import MB, FilesBudget, over_total, too_large


def test_files_are_taken_in_order_until_the_total_and_a_smaller_one_still_fits():
    budget = FilesBudget(file_mb=3, total_mb=5)
    a, b, c = budget.claim("a.csv"), budget.claim("b.csv"), budget.claim("c.csv")
    assert a.refusal(3 * MB) is None
    assert b.refusal(3 * MB) == over_total("b.csv", 5)
    assert c.refusal(2 * MB) is None  # b gave back nothing it did not take: 2 MB were left
    assert budget.left == 0 and (a.held, b.held, c.held) == (3 * MB, 0, 2 * MB)


def test_one_file_is_held_to_its_own_cap_before_the_total():
    claim = FilesBudget(file_mb=1, total_mb=10).claim("big.csv")
    assert claim.refusal(MB + 1) == too_large("big.csv", 1) and claim.held == 0
    assert claim.most() == MB


def test_a_claim_grows_with_the_bytes_and_a_refused_file_gives_back_what_it_held():
    """The backstop while streaming: two files with no stated size share the rest as they arrive."""
    budget = FilesBudget(file_mb=2, total_mb=2)
    first, second = budget.claim("first.csv"), budget.claim("second.csv")
    assert first.refusal(MB) is None and second.refusal(MB // 2) is None
    assert first.most() == MB + MB // 2  # what it holds and what is left
    refused = first.refusal(MB + MB // 2 + 1)
    assert refused == over_total("first.csv", 2) and refused.data is None
    assert (first.held, budget.left) == (0, MB + MB // 2)  # its megabyte is back for the others
    assert second.refusal(2 * MB - 1) is None


def test_settling_holds_exactly_the_bytes_kept():
    budget = FilesBudget(file_mb=2, total_mb=2)
    claim = budget.claim("said-larger.csv")
    assert claim.refusal(2 * MB) is None  # the platform said 2 MB; 10 bytes came
    assert claim.settle(SharedFile("said-larger.csv", b"x" * 10)).data == b"x" * 10
    assert budget.left == 2 * MB - 10
    failed = budget.claim("failed.csv")
    assert failed.refusal(MB) is None
    failed.settle(SharedFile("failed.csv", refusal="Slack would not send it (HTTP 500)."))
    assert budget.left == 2 * MB - 10


def test_files_already_waiting_count_towards_the_total():
    budget = FilesBudget(file_mb=2, total_mb=2, held=2 * MB - 5)
    claim = budget.claim("late.csv")
    assert claim.most() == 5 and claim.refusal(6) == over_total("late.csv", 2)


def test_the_total_is_one_sentence_saying_what_to_do():
    said = over_total("sales.csv", 200)
    assert said.data is None and said.name == "sales.csv"
    assert said.refusal == (
        "Together with the other files shared with it, it passes the 200 MB I take from one message's "
        "files; share it with a question of its own."
    )
