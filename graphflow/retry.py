"""Retrying a failing node within a run: ``RetryPolicy`` and how long to wait.

A node may have one policy or a sequence of them (the first whose ``retry_on`` matches the
error decides, as LangGraph users write them). Waits grow exponentially from
``initial_interval`` by ``backoff_factor`` up to ``max_interval``; with ``jitter`` each wait
is drawn between half of it and all of it, so that many failing tasks do not retry in step.
Pauses and graphflow's own errors are never retried. Attempts are counted across
processes: the engine commits a task's attempt count before it waits to retry, so a crash
does not reset the budget.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from graphflow.errors import InvalidArgumentError

RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""What a policy retries: exception types, or a predicate on the exception."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry a failing node: ``max_attempts`` in all, waiting between attempts.

    Args:
        max_attempts: attempts in all, the first included (1: never retry).
        initial_interval: seconds before the first retry.
        backoff_factor: each further wait is this many times the one before.
        max_interval: the cap of any wait, in seconds.
        jitter: draw each wait between half of it and all of it.
        retry_on: exception types, or a predicate ``fn(exc) -> bool``.
    """

    max_attempts: int = 3
    initial_interval: float = 0.5
    backoff_factor: float = 2.0
    max_interval: float = 128.0
    jitter: bool = True
    retry_on: RetryOn = Exception

    def __post_init__(self) -> None:
        n = self.max_attempts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgumentError(f"RetryPolicy.max_attempts must be an int >= 1, not {n!r}")
        for name in ("initial_interval", "backoff_factor", "max_interval"):
            v = getattr(self, name)
            number = isinstance(v, int | float) and not isinstance(v, bool)
            if not number or not math.isfinite(v) or v < 0:
                raise InvalidArgumentError(
                    f"RetryPolicy.{name} must be a finite number >= 0, not {v!r}"
                )
        r = self.retry_on
        ok = (
            _is_error_type(r)
            or (isinstance(r, tuple) and bool(r) and all(_is_error_type(t) for t in r))
            or (callable(r) and not isinstance(r, type))
        )
        if not ok:
            raise InvalidArgumentError(
                f"RetryPolicy.retry_on must be an exception type, a tuple of them or a "
                f"predicate, not {r!r}"
            )

    def matches(self, error: BaseException) -> bool:
        """Whether this policy retries ``error``."""
        r = self.retry_on
        if isinstance(r, type | tuple):
            return isinstance(error, r)
        return bool(r(error))

    def wait(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first)."""
        base = self.initial_interval
        try:
            grown = base * self.backoff_factor ** (retry - 1)
        except OverflowError:  # (a factor above 1 after about a thousand retries)
            grown = math.inf if base > 0 else 0.0
        interval = min(self.max_interval, grown)
        return random.uniform(interval / 2, interval) if self.jitter else interval


def _is_error_type(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def policies(retry: Any, *, node: str) -> tuple[RetryPolicy, ...]:
    """``add_node(retry=...)`` as a tuple of policies: None, one policy or a sequence."""
    if retry is None:
        return ()
    if isinstance(retry, RetryPolicy):
        return (retry,)
    if isinstance(retry, Sequence) and not isinstance(retry, str | bytes):
        items = tuple(retry)
        if all(isinstance(p, RetryPolicy) for p in items):
            return items
    raise InvalidArgumentError(
        f"node {node!r}: retry must be a RetryPolicy or a sequence of them, not {retry!r}"
    )


def wait_before_retry(
    retry: Sequence[RetryPolicy], error: BaseException, attempts: int
) -> float | None:
    """Seconds to wait before attempt ``attempts + 1`` after ``error``, or None: give up.

    ``attempts`` counts the attempts made so far under this run's budget. The first policy
    whose ``retry_on`` matches decides; no match means no retry.
    """
    for policy in retry:
        if policy.matches(error):
            if attempts >= policy.max_attempts:
                return None
            return policy.wait(attempts)
    return None
