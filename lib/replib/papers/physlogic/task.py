"""PhysChain, the toy world of the PhysLogic chapter: multi-step physics word problems with their
ground-truth logical nexuses, a "teacher" that writes candidate solutions with controlled defects,
the token format of the tiny language model, and answer scoring.

A problem gives a few base quantities (integers 2 to 5) and asks for a target quantity. Every law is
a product of two quantities (``out = in1 * in2``); a problem back-chains from the target to given
quantities, so a problem with ``n`` derived quantities has ``n`` nexuses, one per law, in an order
where every quantity is derived before it is used. Problems with a value above ``MAX_VALUE`` are
left out, so every number is one token; :func:`all_problems` lists every problem there is (780
with 2 or 3 nexuses).

A step is seven tokens, ``out in1 in2 v1 v2 result .``, and reads as a canonical sentence such as
"By Newton's second law, F = m * a = 2 * 3 = 6." The answer is ``= value`` and the end token.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = [
    "LAWS", "QUANTITIES", "MAX_VALUE", "BASE_VALUES", "DEFECTS", "VOCAB", "TOKEN", "PAD", "EOS",
    "all_problems", "sample_problems", "nexus_steps", "nexus_weights", "step_sentence", "answer_sentence", "reference_sentences",
    "trace_text", "teacher_candidate", "defective_trace", "prompt_tokens", "trace_tokens",
    "parse_completion", "is_correct",
]

# out: (in1, in2, the law's phrase). The laws are products so that each step is one lookup.
LAWS = {
    "v": ("a", "t", "By the law of uniform acceleration"),
    "F": ("m", "a", "By Newton's second law"),
    "p": ("m", "v", "By the definition of momentum"),
    "d": ("v", "t", "By the law of uniform motion"),
    "J": ("F", "t", "By the impulse theorem"),
    "W": ("F", "d", "By the work theorem"),
    "K": ("p", "v", "By the vis viva law"),
    "U": ("I", "R", "By Ohm's law"),
    "P": ("U", "I", "By the electric power law"),
    "Q": ("I", "t", "By the definition of current"),
    "E": ("P", "t", "By the law of electric energy"),
}
BASE = ("m", "a", "t", "I", "R")
QUANTITIES = BASE + tuple(LAWS)
MAX_VALUE = 255
BASE_VALUES = (2, 3, 4, 5)
DEFECTS = ("skip", "swap", "loop", "irrelevant", "shortcut", "slip")

PAD, EOS, STOP, ASK, EQUALS = "<pad>", "<eos>", ".", "?", "="
VOCAB = [PAD, EOS, STOP, ASK, EQUALS, *QUANTITIES, *[str(v) for v in range(MAX_VALUE + 1)]]
TOKEN = {word: i for i, word in enumerate(VOCAB)}


# --------------------------------------------------------------------------------------------
# Problems and their nexuses
# --------------------------------------------------------------------------------------------


def _structures(target: str) -> set[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Every way to back-chain from ``target``: (derived quantities in derivation order, given
    quantities). Each input a law can derive is either derived (once) or given."""
    found = set()

    def visit(pending, decided, derived):
        if not pending:
            found.add((tuple(derived), tuple(given_order(q for q, how in decided.items() if how == "given"))))
            return
        (q, finished), rest = pending[0], pending[1:]
        if finished:
            return visit(rest, decided, derived + [q])
        if q in decided:
            return visit(rest, decided, derived)
        choices = ["derived"] if q == target else (["derived", "given"] if q in LAWS else ["given"])
        for how in choices:
            inputs = [(LAWS[q][0], False), (LAWS[q][1], False), (q, True)] if how == "derived" else []
            visit(inputs + rest, {**decided, q: how}, derived)

    visit([(target, False)], {}, [])
    return found


def given_order(given) -> list[str]:
    return sorted(given, key=QUANTITIES.index)


def all_problems(steps: tuple[int, ...]) -> list[dict]:
    """Every problem whose derivation has a number of nexuses in ``steps`` and whose values (base
    values from ``BASE_VALUES``) stay within ``MAX_VALUE``, in a fixed order:
    ``{"target", "given": {q: value}, "steps": [(out, in1, in2, v1, v2, result)], "answer"}``."""
    problems = []
    for target in LAWS:
        for derived, given in sorted(_structures(target)):
            if len(derived) not in steps:
                continue
            for base in itertools.product(BASE_VALUES, repeat=len(given)):
                values = dict(zip(given, base))
                chain = []
                for q in derived:
                    in1, in2, _ = LAWS[q]
                    values[q] = values[in1] * values[in2]
                    chain.append((q, in1, in2, values[in1], values[in2], values[q]))
                if max(values.values()) <= MAX_VALUE:
                    problems.append({"target": target, "given": dict(zip(given, base)), "steps": chain,
                                     "answer": values[target]})
    return problems


def sample_problems(n: int, steps: tuple[int, ...], rng: np.random.Generator) -> list[dict]:
    """``n`` distinct problems drawn uniformly from :func:`all_problems` (all of them, shuffled,
    if there are fewer)."""
    pool = all_problems(steps)
    return [pool[k] for k in rng.permutation(len(pool))[:n]]


def nexus_steps(problem: dict) -> list[tuple]:
    """The ground-truth logical nexuses of a problem: its derivation steps, in order."""
    return list(problem["steps"])


def nexus_weights(problem: dict) -> np.ndarray:
    """Importance weights of the nexuses (ours: the paper's weights come with its data): 2 for the
    step that derives the asked quantity, 1 for the others."""
    return np.array([2.0 if s[0] == problem["target"] else 1.0 for s in problem["steps"]])


# --------------------------------------------------------------------------------------------
# Text: canonical sentences
# --------------------------------------------------------------------------------------------


def step_sentence(step: tuple) -> str:
    """The canonical sentence of one step, e.g. "By Newton's second law, F = m * a = 2 * 3 = 6."."""
    out, in1, in2, v1, v2, result = step
    return f"{LAWS[out][2]}, {out} = {in1} * {in2} = {v1} * {v2} = {result}."


def answer_sentence(target: str, value) -> str:
    return f"So the answer is {target} = {value}."


def reference_sentences(problems: list[dict]) -> list[str]:
    """The corpus the TF-IDF encoder is fitted on: every nexus and answer sentence of ``problems``."""
    return ([step_sentence(s) for p in problems for s in p["steps"]]
            + [answer_sentence(p["target"], p["answer"]) for p in problems])


def trace_text(steps: list[tuple], target: str, answer) -> str:
    """A trace as text: one sentence per step, then the answer sentence (sentences end with '. ')."""
    return " ".join([step_sentence(s) for s in steps] + [answer_sentence(target, answer)])


# --------------------------------------------------------------------------------------------
# The teacher: candidate solutions with controlled defects
# --------------------------------------------------------------------------------------------


def _irrelevant_step(problem: dict, rng: np.random.Generator):
    """A true statement the derivation does not need: a law whose inputs are known but whose output
    is neither derived nor given (None if there is none within MAX_VALUE)."""
    known = dict(problem["given"])
    known.update({s[0]: s[5] for s in problem["steps"]})
    options = [(q, i1, i2, known[i1], known[i2], known[i1] * known[i2]) for q, (i1, i2, _) in LAWS.items()
               if q not in known and i1 in known and i2 in known and known[i1] * known[i2] <= MAX_VALUE]
    return options[rng.integers(len(options))] if options else None


def defective_trace(problem: dict, defect: str, rng: np.random.Generator) -> tuple[list[tuple], int]:
    """The problem's derivation with one defect injected; returns ``(steps, answer)``.

    ``skip``: a nexus other than the last is left out (later steps still use its correct value).
    ``swap``: two adjacent steps where the later one uses the earlier one's output trade places.
    ``loop``: an earlier step is repeated after a later one. ``irrelevant``: a true but unneeded
    statement is inserted. ``shortcut``: no steps, only the answer. ``slip``: an arithmetic slip
    in the last step (or, with no steps, in the answer) makes the answer wrong. Where a defect cannot apply (a one-step problem has
    nothing to skip), the steps come back unchanged."""
    steps, answer = list(problem["steps"]), problem["answer"]
    n = len(steps)
    if defect == "skip" and n >= 2:
        del steps[rng.integers(n - 1)]
    elif defect == "swap":
        pairs = [k for k in range(n - 1) if steps[k][0] in steps[k + 1][1:3]]
        if pairs:
            k = pairs[rng.integers(len(pairs))]
            steps[k], steps[k + 1] = steps[k + 1], steps[k]
    elif defect == "loop" and n >= 2:
        k = int(rng.integers(n - 1))
        at = int(rng.integers(k + 2, n + 1))
        steps.insert(at, steps[k])
    elif defect == "irrelevant":
        extra = _irrelevant_step(problem, rng)
        if extra is not None:
            steps.insert(int(rng.integers(n)), extra)
    elif defect == "shortcut":
        steps = []
    elif defect == "slip":
        wrong = answer + int(rng.choice([1, 2])) * (1 if answer + 2 <= MAX_VALUE else -1)
        if steps:
            steps[-1] = (*steps[-1][:5], wrong)
        answer = wrong
    return steps, answer


def teacher_candidate(problem: dict, rates: dict, rng: np.random.Generator) -> dict:
    """One candidate solution: each defect of ``rates`` is applied with its probability, independently
    (``shortcut`` replaces the steps; the other defects apply in the order of ``DEFECTS``). Returns
    ``{"steps", "answer", "defects"}`` (the defects that changed the trace)."""
    steps, answer, applied = list(problem["steps"]), problem["answer"], []
    current = dict(problem, steps=steps)
    for defect in DEFECTS:
        if rng.random() < rates.get(defect, 0.0):
            new_steps, new_answer = defective_trace(current, defect, rng)
            if new_steps != current["steps"] or new_answer != answer:
                applied.append(defect)
                steps, answer = new_steps, new_answer
                current = dict(problem, steps=steps)
    return {"steps": steps, "answer": answer, "defects": applied}


# --------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------


def prompt_tokens(problem: dict) -> list[int]:
    """``q1 v1 q2 v2 ... ? target``: the given quantities in a fixed order, then the question."""
    words = [w for q, v in problem["given"].items() for w in (q, str(v))] + [ASK, problem["target"]]
    return [TOKEN[w] for w in words]


def trace_tokens(steps: list[tuple], answer) -> list[int]:
    """Seven tokens per step, ``out in1 in2 v1 v2 result .``, then ``= answer <eos>``."""
    words = [w for s in steps for w in (s[0], s[1], s[2], str(s[3]), str(s[4]), str(s[5]), STOP)]
    return [TOKEN[w] for w in words + [EQUALS, str(answer), EOS]]


def parse_completion(tokens, problem: dict) -> tuple[str, int | None]:
    """Read a generated completion back: the reasoning text (one sentence per well-formed step,
    malformed chunks written out word by word, then the answer sentence) and the answer (None if
    the completion has no ``= number`` before its end)."""
    words = [VOCAB[int(t)] for t in tokens]
    if EOS in words:
        words = words[: words.index(EOS)]
    answer = None
    if EQUALS in words:
        at = len(words) - 1 - words[::-1].index(EQUALS)
        tail = words[at + 1:]
        if tail and tail[0].isdigit():
            answer = int(tail[0])
        words = words[:at]
    sentences, chunk = [], []
    for w in words + [STOP]:
        if w != STOP:
            chunk.append(w)
            continue
        if not chunk:
            continue
        if len(chunk) == 6 and chunk[0] in LAWS and all(x.isdigit() for x in chunk[3:]):
            sentences.append(step_sentence((chunk[0], chunk[1], chunk[2], *map(int, chunk[3:]))))
        else:
            sentences.append(" ".join(chunk) + ".")
        chunk = []
    if answer is not None:
        sentences.append(answer_sentence(problem["target"], answer))
    return " ".join(sentences), answer


def is_correct(answer, problem: dict) -> bool:
    """Exact match of the final answer (the paper's 5% rule is equivalent for these integers)."""
    return answer is not None and int(answer) == int(problem["answer"])
