"""The sentence for a turn the session store could not carry: the store's own sentence set inside it."""

from __future__ import annotations

import pytest

from core.sessions import StoreUnavailable
from core.turn_lock import store_failure


@pytest.mark.parametrize(
    ("reason", "ran", "said"),
    [
        (
            "Redis at 127.0.0.1:6390 is not reachable: connection refused.",
            True,
            "I can't use my session store right now (Redis at 127.0.0.1:6390 is not reachable: connection "
            "refused), so this answer was not saved; please try again shortly.",
        ),
        (
            "The session database in /h cannot be written: no space left on device.",
            False,
            "I can't use my session store right now (The session database in /h cannot be written: no "
            "space left on device). Nothing was changed; please try again shortly.",
        ),
        (
            "Redis at h:1 is not reachable: it did not answer in time…",
            True,
            "I can't use my session store right now (Redis at h:1 is not reachable: it did not answer in "
            "time…), so this answer was not saved; please try again shortly.",
        ),
    ],
)
def test_the_stores_sentence_is_set_inside_without_its_full_stop(reason, ran, said):
    """It read "(… connection refused.), so this answer…": a full stop inside the parentheses."""
    text, _, detail = store_failure(StoreUnavailable(reason), surface="terminal", ran=ran)
    assert (text, detail) == (said, "")


@pytest.mark.parametrize(
    ("surface", "sent", "said"),
    [
        (
            "terminal",
            True,
            "I can't use my session store right now (Redis at h:1 is not reachable: it did not answer "
            "within 3 s), so this answer may not be kept for follow-ups; if a follow-up misses it, ask it again.",
        ),
        (
            "slack",
            True,
            "I can't use my session store right now, so this answer may not be kept for follow-ups; if a "
            "follow-up misses it, ask it again.",
        ),
        (
            "terminal",
            False,
            "I can't use my session store right now (Redis at h:1 is not reachable: it did not answer "
            "within 3 s), so this answer was not saved; please try again shortly.",
        ),
    ],
)
def test_a_write_sent_and_never_answered_is_not_said_to_be_lost(surface, sent, said):
    """A frozen Redis applies the history it was sent when it thaws: "this answer was not saved" was
    false (a follow-up found the answer an `ask` had never shown). Refused outright, it is true."""
    reason = "Redis at h:1 is not reachable: it did not answer within 3 s."
    text, _, _ = store_failure(StoreUnavailable(reason, may_have_written=sent), surface=surface, ran=True)
    assert text == said
