"""Student hand-outs: every stub parses, keeps decorators, signature and docstring, loses the answer,
and the chapter's grader reports it as not written yet."""

import ast
import importlib
import re
from pathlib import Path

import jupytext
import numpy as np
import pytest

from replib.core.paths import chapter_slugs
from replib.core.student import SOLUTION_TAG, blank_solution, write_student_notebooks

ROOT = Path(__file__).resolve().parents[1]
GRADER_CALL = re.compile(r"exercises\.(check_\w+)\((\w+)\)")


def test_one_line_functions_keep_their_signature():
    stub = blank_solution("def f(x): return x\n")
    tree = ast.parse(stub)
    assert [n.name for n in tree.body] == ["f"] and [a.arg for a in tree.body[0].args.args] == ["x"]
    assert "return x" not in stub and "NotImplementedError" in stub


def test_decorators_signature_and_docstring_stay_the_answer_goes():
    source = '''
@staticmethod
@lru_cache(maxsize=2)
def g(a: int,
      b: float = 3.0) -> float:
    """Add.

    Returns a + b."""
    total = a + b
    return total
'''
    stub = blank_solution(source)
    node = ast.parse(stub).body[0]
    assert [ast.unparse(d) for d in node.decorator_list] == ["staticmethod", "lru_cache(maxsize=2)"]
    assert ast.unparse(node.args) == "a: int, b: float=3.0" and ast.unparse(node.returns) == "float"
    assert ast.get_docstring(node) == "Add.\n\nReturns a + b."
    assert "total" not in stub and len(node.body) == 2 and isinstance(node.body[1], ast.Raise)


def test_only_functions_are_allowed_in_a_solution_cell():
    with pytest.raises(ValueError, match="may only define functions"):
        blank_solution("x = 1\n")


@pytest.mark.parametrize("slug", chapter_slugs())
def test_handout_stubs_parse_and_the_graders_say_not_written_yet(slug, tmp_path):
    written = write_student_notebooks(ROOT / "notebooks" / slug, tmp_path)
    assert sorted(p.name for p in written) == ["01_theory.ipynb", "02_implementation.ipynb", "03_experiment.ipynb"]
    exercises = importlib.import_module(f"replib.papers.{slug}.exercises")
    graded = 0
    for path in written:
        original = jupytext.read(ROOT / "notebooks" / slug / f"{path.stem}.py")
        handout = jupytext.read(path)
        text = "\n".join(c.source for c in handout.cells if c.cell_type == "code")
        for before, after in zip(original.cells, handout.cells):
            if SOLUTION_TAG not in before.metadata.get("tags", []):
                assert after.source == before.source
                continue
            assert "hide-input" not in after.metadata.get("tags", [])
            stub_tree = ast.parse(after.source)  # every stub parses
            answer = {ast.unparse(s) for n in ast.parse(before.source).body for s in n.body
                      if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))}
            kept = {ast.unparse(s) for n in stub_tree.body for s in n.body}
            assert not answer & kept, "answer lines left in the hand-out"
            namespace = {"np": np}
            exec(compile(after.source, str(path), "exec"), namespace)
            for check, fn in GRADER_CALL.findall(text):
                if fn in namespace:
                    with pytest.raises(AssertionError, match="not written yet"):
                        getattr(exercises, check)(namespace[fn])
                    graded += 1
    assert graded >= 1, f"{slug}: no exercise grader was exercised on a stub"
