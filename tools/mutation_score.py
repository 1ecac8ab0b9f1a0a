"""Mutation score from `mutmut results --all true` on stdin (used by tools/mutants.sh).

    mutmut results --all true | python tools/mutation_score.py tools/mutants_equivalent.txt

Prints the count of each status, then the score per mutated file and in all: mutants that some test
notices (killed, or a timeout: the tests ran past mutmut's limit) over all mutants, leaving out the
ones named in the equivalents file (one per line, `name<TAB>why no input can tell it from the code`;
lines starting with # are comments)."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

CAUGHT = ("killed", "timeout")


def equivalents(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.split("\t")[0].strip() for line in lines if line.strip() and not line.startswith("#")}


def main(argv: list[str]) -> int:
    skip = equivalents(Path(argv[1])) if len(argv) > 1 else set()
    statuses: dict[str, Counter] = defaultdict(Counter)
    left_out = 0
    for line in sys.stdin:
        if ":" not in line:
            continue
        name, status = (part.strip() for part in line.rsplit(":", 1))
        if name in skip:
            left_out += 1
            continue
        module = name.split(".x_")[0].split(".xǁ")[0]
        statuses[module][status] += 1
    total = sum(statuses.values(), Counter())
    for status, count in sorted(total.items()):
        print(f"{count:7d} {status}")
    for module, counts in sorted(statuses.items()):
        n = sum(counts.values())
        caught = sum(counts[s] for s in CAUGHT)
        print(f"score {module}: {caught}/{n} = {100 * caught / max(n, 1):.1f}%")
    n, caught = sum(total.values()), sum(total[s] for s in CAUGHT)
    print(f"score: {caught}/{n} = {100 * caught / max(n, 1):.1f}% ({left_out} equivalent mutants left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
