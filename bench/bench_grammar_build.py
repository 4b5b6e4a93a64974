"""Grammar builds grow linearly with a schema's checked subschemas (worker/grammar/schema_grammar.py):
one tool holding an anyOf of N tiny anchored ``pattern`` subschemas (tests/support/hostile_requests.py,
``pattern_tools``), built in this process under a budget large enough for every N. Prints the CPU
time of each build and, as the figure, the ratio of the largest build's time per subschema to the
smallest's, measured in the same run: about 1 when linear, N_max / N_min when quadratic (the
converter once checked each such subschema against every rule written before it).

Run: .venv/bin/python bench/bench_grammar_build.py [--sizes 300,600,1200,1500]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.hostile_requests import pattern_tools
from worker.formats import FORMATS
from worker.grammar.budget import GrammarBudget, use_budget
from worker.grammar.tasks import tool_grammar


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="300,600,1200,1500", help="subschemas in the one tool's anyOf")
    sizes = [int(n) for n in p.parse_args().sizes.split(",")]
    per: dict[int, float] = {}
    with use_budget(GrammarBudget(max_bytes=1 << 30)):
        for n in sizes:
            tools = pattern_tools("bench", tools=1, patterns=n)["tools"]
            t0 = time.process_time()
            grammar = tool_grammar(FORMATS["hermes"], tools, False)
            took = time.process_time() - t0
            per[n] = took / n
            print(f"{n:5} pattern subschemas: {len(grammar):7} bytes of grammar in {took:.3f} s of CPU")
    lo, hi = min(sizes), max(sizes)
    print(f"time per subschema at {hi} vs {lo}: {per[hi] / per[lo]:.2f}x (linear ~1x, quadratic ~{hi / lo:.0f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
