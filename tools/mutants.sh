#!/usr/bin/env bash
# Mutation testing of replib (make mutants): mutmut plants one small change at a time (a flipped sign,
# a dropped term, < for <=) and runs the tests that cover the changed function; a mutant that no test
# notices "survived". mutmut expects src/ or a flat layout, so this runs in a scratch copy where lib/
# becomes src/ (tests that name lib/ paths are rewritten there, not here).
#
#   [TESTS='tests/...'] tools/mutants.sh [PATTERN ...]
#   default: replib/core/ledger.py against the ledger, results and core tests (about 10 min on 2 cores)
#   e.g. TESTS=tests/papers/test_foam.py tools/mutants.sh replib/papers/foam/method.py
#
# Tests that compare fingerprints with the committed ones are left out: the copy's paths differ
# (src/ for lib/), so they would fail for every mutant alike and tell nothing. The tests that compare
# regenerated pages and verdict boxes with the committed ones stay in (they catch a wrong word or sign
# in the scoreboard): run this on a consistent checkout (`replib check` clean).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$here/.venv/bin/python}"
patterns=("${@:-replib/core/ledger.py}")
read -r -a tests <<< "${TESTS:-tests/test_ledger.py tests/test_results.py tests/test_core.py}"
work="$(mktemp -d /tmp/replib-mutants.XXXXXX)"
trap 'echo "mutants: scratch copy kept in $work (mutmut results / mutmut show NAME there)"' EXIT
mkdir -p "$work/src"
cp -r "$here/lib/replib" "$work/src/replib"
cp -r "$here/tests" "$here/notebooks" "$here/data" "$here/book" "$here/tools" "$here/_toc.yml" \
      "$here/_config.yml" "$here/README.md" "$here/pyproject.toml" "$work/"
rm -rf "$work/data/cache"
grep -rl "lib/replib" "$work/tests" | xargs -r sed -i 's#lib/replib#src/replib#g'
{
  echo "[mutmut]"
  echo "source_paths=src/replib"
  echo "only_mutate="; for p in "${patterns[@]}"; do echo "    src/$p"; done
  echo "also_copy=notebooks"; for f in data book tools _toc.yml _config.yml README.md; do echo "    $f"; done
  echo "pytest_add_cli_args_test_selection=${tests[0]}"; for t in "${tests[@]:1}"; do echo "    $t"; done
  echo "pytest_add_cli_args=-p"; echo "    no:cacheprovider"; echo "    -q"; echo "    -k"
  echo "    not installed_by_pyproject and not list_and_check and not check_sees_stale and not match_their_sources and not fingerprint and not rejudge and not stale"
} > "$work/setup.cfg"
cd "$work"
"$python" -m mutmut run
"$python" -m mutmut results | awk '{print $NF}' | sort | uniq -c
