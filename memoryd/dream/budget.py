"""How long a dream pass may work, and whether it was asked to stop: checked between steps."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memoryd.config import format_duration
from memoryd.errors import MemorydError

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


class PassStopped(MemorydError):
    """A pass stopped before its moves (over a time budget, or memoryd is stopping)."""

    def __init__(self, message: str, *, budget: str = "") -> None:
        super().__init__(message)
        self.budget = budget  # the config key that ran out, or "" when asked to stop


@dataclass(slots=True)
class PassBudget:
    """The time budgets of one pass (`dream.file_budget`, `dream.pass_budget`) and a stop flag.

    Python cannot interrupt a step (a regex, say), so the pass checks between steps: after each
    file, each consult lookup, the plan, and before the first move; over a budget or asked to
    stop, PassStopped, and nothing moves. The parsers are linear, so a step at the size limits
    takes well under a second: the budgets bound the pass whatever it meets.
    """

    file_budget: float
    pass_budget: float
    stop: Callable[[], bool] = lambda: False
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @classmethod
    def of(
        cls,
        rt: "Runtime",
        *,
        stop: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> "PassBudget":
        return cls(rt.config.dream.file_budget, rt.config.dream.pass_budget, stop, clock)

    def check(self, step: str, step_started: float | None = None) -> None:
        """Raise PassStopped when asked to stop or over a budget (the file budget: with the
        time ``step`` started); ``step`` names it (a file name, never text)."""
        if self.stop():
            raise PassStopped(f"memoryd is stopping: the pass stopped at {step} and moved nothing")
        now = self.clock()
        if step_started is not None and now - step_started > self.file_budget:
            raise PassStopped(
                f"{step} took {now - step_started:.1f} s, over dream.file_budget "
                f"({format_duration(self.file_budget)}): the pass stopped and moved nothing",
                budget="dream.file_budget",
            )
        if now - self.started > self.pass_budget:
            raise PassStopped(
                f"the pass ran {now - self.started:.1f} s, over dream.pass_budget "
                f"({format_duration(self.pass_budget)}), at {step}: it stopped and moved nothing",
                budget="dream.pass_budget",
            )
