"""What the framework tests share (tests/e2e/test_frameworks*.py, tests/integration/
test_frameworks_scripted.py): the question, and the zorbix function as a framework's own tool,
which records every call it gets. Their gateway and worker: tests/integration/framework_stack.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

QUESTION = "Calculate the zorbix of 15 and 7"
ARGS = {"zorb": 15, "bix": 7}
RESULT = 22  # what the tool returns for ARGS: the answer must come from the tool


@dataclass
class Zorbix:
    """The tool as a caller's own function: ``fn`` is what a framework wraps, ``calls`` what it got."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        def calculate_zorbix(zorb: int, bix: int) -> int:
            """Calculate the zorbix of two whole numbers, zorb and bix.

            Args:
                zorb: The first whole number.
                bix: The second whole number.
            """
            self.calls.append({"zorb": zorb, "bix": bix})
            return zorb + bix

        self.fn = calculate_zorbix

    def ran_once_with_the_question_s_numbers(self) -> bool:
        return self.calls == [ARGS]
