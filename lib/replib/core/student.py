"""Student copies of a chapter: every exercise answer (a code cell tagged ``solution``) is replaced by
its function signatures with a ``raise NotImplementedError`` body, so the graders fail until the
student writes the answer."""

from __future__ import annotations

import ast
from pathlib import Path

SOLUTION_TAG = "solution"


STUB = 'raise NotImplementedError("write your answer here")'


def blank_solution(source: str) -> str:
    """Keep each top-level function's decorators, signature and docstring; replace its body by a stub
    that raises NotImplementedError (so the chapter's grader reports "not written yet")."""
    tree = ast.parse(source)
    stubs = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ValueError("a solution cell may only define functions")
        doc = ast.get_docstring(node, clean=False)
        node.body = ([ast.Expr(ast.Constant(doc))] if doc is not None else []) + [ast.parse(STUB).body[0]]
        stubs.append(ast.unparse(node))
    return "\n\n\n".join(stubs) + "\n"


def write_student_notebooks(chapter_dir: Path, out_dir: Path) -> list[Path]:
    """Student versions (output-free .ipynb) of the chapter's notebooks in ``out_dir``."""
    import jupytext

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(chapter_dir.glob("0*.py")):
        nb = jupytext.read(source)
        for cell in nb.cells:
            if cell.cell_type == "code" and SOLUTION_TAG in cell.metadata.get("tags", []):
                cell.source = blank_solution(cell.source)
                cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != "hide-input"]
        target = out_dir / f"{source.stem}.ipynb"
        jupytext.write(nb, target, fmt="ipynb")
        written.append(target)
    return written
