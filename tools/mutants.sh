#!/usr/bin/env bash
# Mutation testing of replib (make mutants): mutmut plants one small change at a time (a flipped sign,
# a dropped term, < for <=) and runs the tests that cover the changed function; a mutant that no test
# notices "survived". mutmut expects src/ or a flat layout, so this runs in a scratch copy where lib/
# becomes src/ (tests that name lib/ paths are rewritten there, not here).
#
#   [TESTS='tests/...'] tools/mutants.sh [PATTERN ...]
#   default: replib/core/ledger.py against the ledger, results and core tests (about 10 min on 2 cores)
#   e.g. TESTS=tests/papers/test_foam.py tools/mutants.sh replib/papers/foam/method.py
#   TIMEOUT_MULTIPLIER (default mutmut's 15): a mutant times out, and counts as caught, past
#   2 x 15 x (its tests' time + 1 s) of CPU. A first pass at 4 ends far sooner where many mutants loop, but
#   flags some slow-to-start tests (datasets, tqdm) too: then set timeout_multiplier=15 in the scratch
#   copy's setup.cfg and run `python -m mutmut run` there again, which re-tests only the timed-out mutants.
#   SKIP='processes or cluster' leaves out more tests by pytest -k expression (slow ones that only
#   re-check what others check, e.g. seeds over worker processes)
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
work="${WORK:-$(mktemp -d /tmp/replib-mutants.XXXXXX)}"
trap 'echo "mutants: scratch copy kept in $work (mutmut results / mutmut show NAME there)"' EXIT
mkdir -p "$work/src"
cp -r "$here/lib/replib" "$work/src/replib"
cp -r "$here/tests" "$here/notebooks" "$here/data" "$here/book" "$here/tools" "$here/_toc.yml" \
      "$here/_config.yml" "$here/README.md" "$here/pyproject.toml" "$work/"
rm -rf "$work/data/cache"
grep -rl "lib/replib" "$work/tests" | xargs -r sed -i 's#lib/replib#src/replib#g'
# tests that read the committed fingerprints or the checkout's own paths (see above)
committed="test_every_package_of_lib_is_installed_by_pyproject or test_list_and_check_report_chapters \
or test_check_sees_stale_results or test_results_match_their_sources or test_fingerprint_covers_notebooks \
or test_the_fingerprint_skips_generated_blocks or test_fingerprints_see_any_text \
or test_a_fingerprint_follows_text or test_stale_results_tell_prose_from_code \
or test_rejudge_keeps_the_values_and_records_that_it_judged_again"
{
  echo "[mutmut]"
  echo "timeout_multiplier=${TIMEOUT_MULTIPLIER:-15}"
  echo "source_paths=src/replib"
  echo "only_mutate="; for p in "${patterns[@]}"; do echo "    src/$p"; done
  echo "also_copy=notebooks"; for f in data book tools _toc.yml _config.yml README.md; do echo "    $f"; done
  echo "pytest_add_cli_args_test_selection=${tests[0]}"; for t in "${tests[@]:1}"; do echo "    $t"; done
  echo "pytest_add_cli_args=-p"; echo "    no:cacheprovider"; echo "    -q"; echo "    -k"
  echo "    not ($committed)${SKIP:+ and not ($SKIP)}"
} > "$work/setup.cfg"
cd "$work"
# torch and pyarrow start thread pools before mutmut forks a child per mutant; in the children they can
# hang, which mutmut would count as a timeout (a caught mutant): one thread each
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
"$python" -m mutmut run
# the score: mutants some test notices (killed, or the tests ran past mutmut's timeout) over all of them;
# mutants listed in tools/mutants_equivalent.txt (no input can tell them from the code) are left out
"$python" -m mutmut results --all true | "$python" "$here/tools/mutation_score.py" "$here/tools/mutants_equivalent.txt"
