"""MiniGUI: the toy phone (and tablet) simulator of the HyperTrack chapter, its recorded episodes and
the small policy that stands in for a GUI vision-language agent.

A *world* (:func:`make_world`) is a set of seeded apps. Every app has a two-letter name, a visual
style (a matrix that distorts how its glyphs look), four to six buttons on its main screen, a list
of eight rows behind every button (four visible at a time, a scroll moves two rows) and a form with
one text field. A task is (app, button, row, word): OPEN the app, CLICK the button, SCROLL down until
the row is visible, CLICK the row, TYPE the word, STOP (5-7 steps). The form's text field is masked,
so the form looks the same before and after typing: only the action history says whether to type
or to stop. Layouts differ per app and per device (phone: portrait grids; tablet: landscape grids,
a side-pane list), so unseen apps and the unseen device are real shifts, not relabelings.

Screens are sets of up to ``K`` elements, each a feature vector (:data:`ELEMENT_FEATURES`): the
glyph's appearance under the app's style, its box (centre, size, normalised to [0, 1]) and its kind.
An action is an integer triple ``[type, arg1, arg2]`` (``-1`` where unused, :data:`ACTION_TYPES`):
OPEN (two name letters), CLICK (an x bin and a y bin of :data:`N_BINS` over [0, 1], the point is the
bin centre), SCROLL (direction), TYPE (word), STOP.

Contents: :func:`make_world`, :func:`sample_tasks`, :func:`record_episodes` (the scripted expert's
reference track, one row per step), :class:`Phone` (the closed-loop simulator of the online
protocol), :func:`to_kit` (integer actions to the evaluation kit's readable form),
:func:`history_features`, :class:`GUIPolicy` (the agent: one attention read-out over the screen's
elements, then a head per action token), :func:`observe` (step rows to tensors) and
:func:`steps_dataset` (the reference steps as a ``datasets.Dataset`` for a reader to look at).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .method import episode_metrics, soeval_history, step_match

__all__ = [
    "ACTION_TYPES", "OPEN", "CLICK", "SCROLL", "TYPE", "STOP", "DIRECTIONS", "WORDS", "LETTERS",
    "N_GLYPHS", "N_BINS", "K", "ELEMENT_FEATURES", "SPLITS", "make_world", "sample_tasks",
    "record_episodes", "Phone", "to_kit", "gt_kit", "history_features", "GUIPolicy", "observe",
    "offline", "semi_online", "online", "evaluate", "steps_dataset",
]

ACTION_TYPES = ("open", "click", "scroll", "type", "stop")
OPEN, CLICK, SCROLL, TYPE, STOP = range(5)
DIRECTIONS = ("up", "down", "left", "right")
# 16 words; a few contain another ("art" in "party"), which the kit's text rule forgives
WORDS = ("art", "party", "rain", "train", "blue", "green", "moon", "noon", "tea", "team", "jazz",
         "kite", "lamp", "map", "river", "stone")
LETTERS = "abcdefghijklmnop"
N_GLYPHS, APPEARANCE, N_BINS, K = 16, 16, 20, 8
KINDS = ("icon", "button", "row", "field")
ELEMENT_FEATURES = APPEARANCE + 4 + len(KINDS)  # appearance, box (cx, cy, w, h), kind one-hot
INSTRUCTION_FEATURES = 2 * len(LETTERS) + 2 * N_GLYPHS + len(WORDS)
HISTORY_STEPS, HISTORY_FEATURES = 2, 2 * (len(ACTION_TYPES) + 1 + 2 + len(DIRECTIONS))
ROWS, VISIBLE, SCROLL_BY = 8, 4, 2
HOME, MAIN, LIST, FORM = range(4)
SPLITS = ("in_domain", "unseen_app", "unseen_device", "unseen_app_device")
POOLS = ("pretrain", "train", "unseen")


# --------------------------------------------------------------------------------------------
# The world: apps, layouts, tasks
# --------------------------------------------------------------------------------------------

@dataclass
class World:
    """Apps of every pool. ``names`` (n_apps, 2) letter ids; ``style`` (n_apps, D, D); ``buttons``
    (n_apps, 6) glyph ids (``n_buttons`` used); ``lists`` (n_apps, 6, ROWS) row glyphs;
    ``layout[device]`` the element boxes of each screen; ``pool`` the app's pool name;
    ``prototypes`` (N_GLYPHS, D) the glyphs' undistorted looks."""

    names: np.ndarray
    style: np.ndarray
    n_buttons: np.ndarray
    buttons: np.ndarray
    lists: np.ndarray
    main_boxes: dict
    list_boxes: dict
    field_box: dict
    home_boxes: np.ndarray
    home_glyphs: np.ndarray
    pool: np.ndarray
    prototypes: np.ndarray
    rendered: dict = field(default_factory=dict, repr=False)  # screens already drawn

    def apps(self, pool: str) -> np.ndarray:
        return np.flatnonzero(self.pool == pool)


def _grid_boxes(rng, cols, rows, n, w_range, h_range, x_span, y_span):
    """``n`` boxes (cx, cy, w, h) in distinct cells of a cols x rows grid with jitter."""
    cells = rng.choice(cols * rows, size=n, replace=False)
    cx = x_span[0] + (x_span[1] - x_span[0]) * ((cells % cols) + 0.5) / cols
    cy = y_span[0] + (y_span[1] - y_span[0]) * ((cells // cols) + 0.5) / rows
    w = rng.uniform(*w_range, size=n)
    h = rng.uniform(*h_range, size=n)
    jitter = 0.25 / np.array([cols, rows])
    cx = cx + rng.uniform(-1, 1, n) * jitter[0] * (x_span[1] - x_span[0]) * 0.5
    cy = cy + rng.uniform(-1, 1, n) * jitter[1] * (y_span[1] - y_span[0]) * 0.5
    return np.stack([cx, cy, w, h], axis=1)


def make_world(seed: int, n_apps: dict | None = None, style_strength: float = 0.35,
               unseen_shift: float = 0.0) -> World:
    """Seeded apps for the three pools (default 30 pretraining, 40 training, 20 unseen apps).
    Phone layouts: buttons in a 2 x 4 portrait grid, full-width list rows; tablet layouts: buttons
    in a 4 x 2 landscape grid, the list in a side pane whose side depends on the app.

    Every app's style is I + ``style_strength`` * (its own random matrix) / sqrt(D). The unseen apps
    belong, in addition, to a visual family that no pretraining or training app has: their style is
    multiplied by one shared matrix I + ``unseen_shift`` * F / sqrt(D) (F drawn once per world),
    so their glyphs look systematically different (0: no family, the unseen apps are drawn like the
    others). The family is drawn last, so the other apps do not depend on ``unseen_shift``."""
    n_apps = n_apps or {"pretrain": 30, "train": 40, "unseen": 20}
    rng = np.random.default_rng([seed, 11])
    total = sum(n_apps.values())
    pool = np.concatenate([[p] * n_apps[p] for p in POOLS])
    codes = rng.choice(len(LETTERS) ** 2, size=total, replace=False)
    names = np.stack([codes // len(LETTERS), codes % len(LETTERS)], axis=1)
    prototypes = rng.normal(size=(N_GLYPHS, APPEARANCE))
    style = np.eye(APPEARANCE) + style_strength * rng.normal(size=(total, APPEARANCE, APPEARANCE)) / np.sqrt(APPEARANCE)
    n_buttons = rng.integers(4, 7, size=total)
    buttons = np.stack([rng.choice(N_GLYPHS, 6, replace=False) for _ in range(total)])
    lists = np.stack([[rng.choice(N_GLYPHS, ROWS, replace=False) for _ in range(6)] for _ in range(total)])
    main = {"phone": np.stack([_grid_boxes(rng, 2, 4, 6, (0.3, 0.4), (0.1, 0.12), (0.05, 0.95), (0.2, 0.9))
                               for _ in range(total)]),
            "tablet": np.stack([_grid_boxes(rng, 4, 2, 6, (0.16, 0.2), (0.14, 0.18), (0.05, 0.95), (0.25, 0.85))
                                for _ in range(total)])}
    top = rng.uniform(0.2, 0.3, size=total)
    gap = rng.uniform(0.13, 0.16, size=total)
    slots = np.arange(VISIBLE)
    phone_rows = np.stack([np.full((total, VISIBLE), 0.5), top[:, None] + gap[:, None] * slots,
                           np.full((total, VISIBLE), 0.8), np.full((total, VISIBLE), 0.1)], axis=2)
    pane = np.where(rng.random(total) < 0.5, 0.3, 0.7)
    tablet_rows = np.stack([np.repeat(pane[:, None], VISIBLE, 1), (top[:, None] + 0.05) + (gap[:, None] + 0.02) * slots,
                            np.full((total, VISIBLE), 0.4), np.full((total, VISIBLE), 0.14)], axis=2)
    fields = {"phone": np.stack([np.full(total, 0.5), rng.uniform(0.2, 0.5, total), np.full(total, 0.8),
                                 np.full(total, 0.1)], axis=1),
              "tablet": np.stack([1 - pane, rng.uniform(0.3, 0.6, total), np.full(total, 0.4),
                                  np.full(total, 0.14)], axis=1)}
    home_boxes = _grid_boxes(rng, 2, 4, 4, (0.2, 0.2), (0.12, 0.12), (0.1, 0.9), (0.2, 0.8))
    home_glyphs = rng.choice(N_GLYPHS, 4, replace=False)
    family = np.eye(APPEARANCE) + unseen_shift * rng.normal(size=(APPEARANCE, APPEARANCE)) / np.sqrt(APPEARANCE)
    unseen = pool == "unseen"
    style[unseen] = style[unseen] @ family
    return World(names, style, n_buttons, buttons, lists, main, {"phone": phone_rows, "tablet": tablet_rows},
                 fields, home_boxes, home_glyphs, pool, prototypes)


def sample_tasks(world: World, apps: np.ndarray, n: int, rng: np.random.Generator,
                 exclude: set | None = None) -> np.ndarray:
    """``n`` distinct tasks (app, button, row, word) over ``apps``, none in ``exclude`` (a set of
    tuples), as an (n, 4) int array."""
    exclude = exclude or set()
    tasks, seen = [], set(exclude)
    while len(tasks) < n:
        a = int(rng.choice(apps))
        t = (a, int(rng.integers(world.n_buttons[a])), int(rng.integers(ROWS)), int(rng.integers(len(WORDS))))
        if t not in seen:
            seen.add(t)
            tasks.append(t)
    return np.array(tasks, dtype=np.int64).reshape(-1, 4)


def scrolls_needed(row: int) -> int:
    """Scrolls down (two rows each) before list row ``row`` is among the four visible rows."""
    return max(0, -(-(row - (VISIBLE - 1)) // SCROLL_BY))


def _elements(world: World, app: int, device: str, screen: int, button: int, offset: int):
    """The screen as (K, F) element features, a (K,) mask, the (K, 4) boxes and a (K,) tag saying
    what each element is (button index, list row index, -1 field, -2 home icon); drawn once."""
    key = (app, device, screen, button if screen == LIST else 0, offset)
    if key not in world.rendered:
        world.rendered[key] = _draw(world, *key)
    return world.rendered[key]


def _draw(world: World, app: int, device: str, screen: int, button: int, offset: int):
    feats = np.zeros((K, ELEMENT_FEATURES))
    boxes = np.zeros((K, 4))
    tag = np.full(K, -9)
    if screen == HOME:
        glyphs, bx, kind, tags = world.home_glyphs, world.home_boxes, 0, np.full(4, -2)
    elif screen == MAIN:
        n = world.n_buttons[app]
        glyphs, bx, kind, tags = world.buttons[app, :n], world.main_boxes[device][app, :n], 1, np.arange(n)
    elif screen == LIST:
        rows = np.arange(offset, offset + VISIBLE)
        glyphs, bx, kind, tags = world.lists[app, button, rows], world.list_boxes[device][app], 2, rows
    else:
        glyphs, bx, kind, tags = None, world.field_box[device][app][None], 3, np.array([-1])
    n = len(bx)
    if glyphs is not None:
        style = world.style[app] if screen != HOME else np.eye(APPEARANCE)
        feats[:n, :APPEARANCE] = world.prototypes[glyphs] @ style.T
    feats[:n, APPEARANCE:APPEARANCE + 4] = bx
    feats[:n, APPEARANCE + 4 + kind] = 1.0
    boxes[:n], tag[:n] = bx, tags
    mask = np.zeros(K, dtype=bool)
    mask[:n] = True
    order = np.random.default_rng([app, screen, offset, button, device == "tablet"]).permutation(K)
    return feats[order], mask[order], boxes[order], tag[order]


def _instruction(world: World, task) -> np.ndarray:
    a, b, r, w = (int(v) for v in task)
    x = np.zeros(INSTRUCTION_FEATURES)
    x[world.names[a, 0]] = 1
    x[len(LETTERS) + world.names[a, 1]] = 1
    x[2 * len(LETTERS) + world.buttons[a, b]] = 1
    x[2 * len(LETTERS) + N_GLYPHS + world.lists[a, b, r]] = 1
    x[2 * len(LETTERS) + 2 * N_GLYPHS + w] = 1
    return x


def _bin(v: float) -> int:
    return int(np.clip(np.floor(v * N_BINS), 0, N_BINS - 1))


def bin_centre(b) -> np.ndarray:
    """The point a CLICK bin stands for: its centre, (b + 0.5) / N_BINS."""
    return (np.asarray(b, dtype=float) + 0.5) / N_BINS


def record_episodes(world: World, tasks: np.ndarray, device: str) -> dict:
    """The scripted expert's reference track for every task, one row per step: ``episode``,
    ``step``, ``length``, screen ``elements``/``mask``/``boxes``, ``instruction``, the reference
    ``action`` (n, 3) with its ground-truth ``box`` (the target element's, zeros when not a click)
    and the reference history ``prev`` (n, HISTORY_STEPS, 3) (``-1`` rows before the first step),
    ``screen`` and ``ambiguous`` (a form step: the screen does not say whether the word is typed)."""
    rows = {k: [] for k in ("episode", "step", "length", "elements", "mask", "boxes", "instruction", "action",
                            "box", "prev", "screen", "ambiguous", "task")}
    for e, task in enumerate(tasks):
        a, b, r, w = (int(v) for v in task)
        k = scrolls_needed(r)
        plan = [(HOME, 0, [OPEN, *world.names[a]], None)]
        plan.append((MAIN, 0, [CLICK, -1, -1], ("button", b)))
        plan += [(LIST, SCROLL_BY * s, [SCROLL, DIRECTIONS.index("down"), -1], None) for s in range(k)]
        plan.append((LIST, SCROLL_BY * k, [CLICK, -1, -1], ("row", r)))
        plan += [(FORM, 0, [TYPE, w, -1], None), (FORM, 0, [STOP, -1, -1], None)]
        instr = _instruction(world, task)
        history = [[-1, -1, -1]] * HISTORY_STEPS
        for t, (screen, offset, action, target) in enumerate(plan):
            feats, mask, boxes, tag = _elements(world, a, device, screen, b, offset)
            box = np.zeros(4)
            if target is not None:
                where = int(np.flatnonzero(tag == target[1])[0])
                box = boxes[where]
                action = [CLICK, _bin(box[0]), _bin(box[1])]
            for key, value in (("episode", e), ("step", t), ("length", len(plan)), ("elements", feats),
                               ("mask", mask), ("boxes", boxes), ("instruction", instr), ("action", action),
                               ("box", box), ("prev", history[-HISTORY_STEPS:]), ("screen", screen),
                               ("ambiguous", screen == FORM), ("task", task)):
                rows[key].append(value)
            history = history + [list(action)]
    return {k: np.asarray(v) for k, v in rows.items()}


# --------------------------------------------------------------------------------------------
# Closed-loop simulator (the online protocol)
# --------------------------------------------------------------------------------------------

class Phone:
    """The device a task runs on, closed loop. ``reset`` shows the home screen; ``step(action)``
    applies an integer action: OPEN opens the named app's main screen (another app's name ends the
    episode as a failure); a CLICK inside an element's box (exact box) follows it (a wrong button
    or row leaves the task's track: failure), a click on empty space does nothing; SCROLL moves
    the list by two rows; TYPE fills the form's field (overwriting); STOP ends the episode, a
    success iff the form holds the task's word. The step limit is the reference length + 3."""

    def __init__(self, world: World, task, device: str):
        self.world, self.task, self.device = world, tuple(int(v) for v in task), device
        self.limit = 5 + scrolls_needed(self.task[2]) + 3

    def reset(self):
        self.screen, self.offset, self.typed, self.t, self.done, self.success = HOME, 0, -1, 0, False, False
        return self.observation()

    def observation(self):
        """The current screen: element features (K, F) and mask (K,)."""
        a, b, _, _ = self.task
        feats, mask, boxes, tag = _elements(self.world, a, self.device, self.screen, b, self.offset)
        self._feats, self._mask, self._boxes, self._tag = feats, mask, boxes, tag
        return feats, mask

    def _end(self, success: bool):
        self.done, self.success = True, success

    def step(self, action) -> bool:
        """Apply ``action`` ([type, arg1, arg2]); returns ``done``."""
        a, b, r, w = self.task
        kind, arg1, arg2 = (int(v) for v in action)
        self.t += 1
        if kind == OPEN:
            if [arg1, arg2] == list(self.world.names[a]):
                self.screen, self.offset = MAIN, 0
            else:
                self._end(False)
        elif kind == CLICK and self.screen in (MAIN, LIST):
            x, y = bin_centre(arg1), bin_centre(arg2)
            box = self._boxes
            inside = (np.abs(x - box[:, 0]) <= box[:, 2] / 2) & (np.abs(y - box[:, 1]) <= box[:, 3] / 2) \
                & (box[:, 2] > 0)
            if inside.any():
                hit = int(self._tag[np.flatnonzero(inside)[0]])
                target = b if self.screen == MAIN else r
                if hit != target:
                    self._end(False)
                else:
                    self.screen = LIST if self.screen == MAIN else FORM
                    self.offset = 0
        elif kind == SCROLL and self.screen == LIST:
            step = {"down": SCROLL_BY, "up": -SCROLL_BY}.get(DIRECTIONS[arg1], 0)
            self.offset = int(np.clip(self.offset + step, 0, ROWS - VISIBLE))
        elif kind == TYPE and self.screen == FORM:
            self.typed = arg1
        elif kind == STOP:
            self._end(self.screen == FORM and self.typed == w)
        if not self.done and self.t >= self.limit:
            self._end(False)
        if not self.done:
            self.observation()
        return self.done


# --------------------------------------------------------------------------------------------
# Actions in the evaluation kit's form, history features
# --------------------------------------------------------------------------------------------

def to_kit(actions: np.ndarray, names: np.ndarray | None = None) -> dict:
    """Integer actions (n, 3) in the evaluation kit's readable form: ``type`` (names of
    :data:`ACTION_TYPES`), ``point`` (n, 2) in [0, 1] (the bin centre; nan unless a click),
    ``direction`` and ``text`` (the typed word, or the opened app's two-letter name) as strings."""
    actions = np.asarray(actions).reshape(-1, 3)
    kinds = actions[:, 0]
    point = np.full((len(actions), 2), np.nan)
    click = kinds == CLICK
    point[click] = bin_centre(actions[click, 1:3])
    direction = np.array([DIRECTIONS[a[1]] if a[0] == SCROLL else "" for a in actions], dtype=object)
    text = np.array([WORDS[a[1]] if a[0] == TYPE else LETTERS[a[1]] + LETTERS[a[2]] if a[0] == OPEN else ""
                     for a in actions], dtype=object)
    return {"type": np.array([ACTION_TYPES[k] if k >= 0 else "none" for k in kinds], dtype=object),
            "point": point, "direction": direction, "text": text}


def gt_kit(rows: dict) -> dict:
    """The reference track's ground truth in the kit's form (the reference action and its box)."""
    kit = to_kit(rows["action"])
    kit["box"] = rows["box"]
    return kit


def history_features(prev: np.ndarray) -> np.ndarray:
    """The previous ``HISTORY_STEPS`` actions (n, HISTORY_STEPS, 3) as features: per action a type
    one-hot (with "none"), the click point (0 unless a click) and the scroll direction one-hot."""
    prev = np.asarray(prev).reshape(-1, HISTORY_STEPS, 3)
    n = len(prev)
    per = len(ACTION_TYPES) + 1 + 2 + len(DIRECTIONS)
    out = np.zeros((n, HISTORY_STEPS, per))
    kinds = prev[:, :, 0]
    out[np.arange(n)[:, None], np.arange(HISTORY_STEPS)[None], np.where(kinds < 0, len(ACTION_TYPES), kinds)] = 1
    click = kinds == CLICK
    out[:, :, 6][click] = bin_centre(prev[:, :, 1][click])
    out[:, :, 7][click] = bin_centre(prev[:, :, 2][click])
    scroll = kinds == SCROLL
    idx = np.nonzero(scroll)
    out[idx[0], idx[1], 8 + prev[:, :, 1][scroll]] = 1
    return out.reshape(n, -1)


# --------------------------------------------------------------------------------------------
# The agent
# --------------------------------------------------------------------------------------------

HEADS = {"kind": len(ACTION_TYPES), "letter1": len(LETTERS), "letter2": len(LETTERS), "point": N_BINS ** 2,
         "direction": len(DIRECTIONS), "word": len(WORDS)}
# the tokens of each action type, in order after the type token; a click's point (x bin, y bin) is
# one token of N_BINS ** 2 values, x * N_BINS + y
ACTION_TOKENS = {OPEN: ("letter1", "letter2"), CLICK: ("point",), SCROLL: ("direction",), TYPE: ("word",),
                 STOP: ()}
_HEAD_START = dict(zip(HEADS, np.cumsum([0, *HEADS.values()])[:-1].tolist()))
# per action type: where each of its three tokens' head starts in the concatenated outputs, and
# which of the three tokens exist
_TOKEN_OFFSET = torch.tensor([[0] + [_HEAD_START[h] for h in ACTION_TOKENS[k]] + [0] * (2 - len(ACTION_TOKENS[k]))
                              for k in range(len(ACTION_TYPES))])
_TOKEN_MASK = torch.tensor([[1.0] * (1 + len(ACTION_TOKENS[k])) + [0.0] * (2 - len(ACTION_TOKENS[k]))
                            for k in range(len(ACTION_TYPES))])
_BIN_CENTRES = torch.as_tensor(bin_centre(np.arange(N_BINS)), dtype=torch.float32)


class GUIPolicy(nn.Module):
    """The small agent that stands in for the VLM. The instruction (less the app's name) and the
    history give a context vector c; every screen element is scored against c from how it looks and
    what kind it is (one attention read-out, the grounding step). The click point is a pointer
    over the elements: p(x, y) = sum_k a_k q_k(x) q_k(y), with q_k a discretised Gaussian around
    element k's centre whose spread is a learned share of the box's width and height. The other
    heads (kind, direction, word) read c, the attended box, the best element's match score (is the
    target on screen at all?) and the screen's mix of element kinds; the app name's letters are
    copied from the instruction (a learned gain times the instruction's letter one-hot, as a
    language model copies a name from its prompt). ``use_history=False`` zeroes the history input
    (the ablation). Outputs log-probabilities per head."""

    def __init__(self, hidden: int = 64, seed: int = 0, use_history: bool = True):
        super().__init__()
        self.use_history = use_history
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            self.context = nn.Sequential(nn.Linear(INSTRUCTION_FEATURES - 2 * len(LETTERS) + HISTORY_FEATURES, hidden),
                                         nn.ReLU(), nn.Linear(hidden, hidden))
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(APPEARANCE + len(KINDS), hidden)
            self.body = nn.Sequential(nn.Linear(hidden + 4 + 1 + len(KINDS), hidden), nn.ReLU(),
                                      nn.Linear(hidden, hidden), nn.ReLU())
            self.heads = nn.ModuleDict({name: nn.Linear(hidden, size) for name, size in HEADS.items()
                                        if name in ("kind", "direction", "word")})
            self.letter_bias = nn.Parameter(torch.zeros(2, len(LETTERS)))
            self.copy_gain = nn.Parameter(torch.zeros(2))
            self.log_spread = nn.Parameter(torch.tensor(-1.0))

    def forward(self, obs: dict, full_point: bool = True) -> dict:
        """Log-probabilities per head. With ``full_point=False`` the click head is returned as its
        mixture parts, ``point_parts`` = (log a (n, K), log q_x (n, K, N_BINS), log q_y (n, K,
        N_BINS)), instead of the (n, N_BINS ** 2) table: training and sampling need only those."""
        hist = obs["history"] if self.use_history else torch.zeros_like(obs["history"])
        c = self.context(torch.cat([obs["instruction"][:, 2 * len(LETTERS):], hist], dim=1))
        elements, mask = obs["elements"], obs["mask"]
        looks = torch.cat([elements[..., :APPEARANCE], elements[..., APPEARANCE + 4:]], dim=-1)
        scores = (self.key(looks) * self.query(c)[:, None]).sum(-1).masked_fill(~mask, -1e9)
        log_attn = torch.log_softmax(scores, dim=1)
        boxes = elements[..., APPEARANCE:APPEARANCE + 4]
        box = (log_attn.exp()[..., None] * boxes).sum(1)
        match = scores.max(dim=1, keepdim=True).values
        kinds = elements[..., APPEARANCE + 4:].sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        z = self.body(torch.cat([c, box, match, kinds], dim=1))
        out = {name: torch.log_softmax(head(z), dim=-1) for name, head in self.heads.items()}
        n_letters = len(LETTERS)
        for j in range(2):  # the name is copied from the instruction
            copied = self.letter_bias[j] + self.copy_gain[j] * obs["instruction"][:, j * n_letters:(j + 1) * n_letters]
            out[f"letter{j + 1}"] = torch.log_softmax(copied, dim=-1)
        spread = self.log_spread.exp()
        qx = _log_bins(boxes[..., 0], boxes[..., 2] * spread)
        qy = _log_bins(boxes[..., 1], boxes[..., 3] * spread)
        if not full_point:
            out["point_parts"] = (log_attn, qx, qy)
            return out
        # sum_k a_k q_k(x) q_k(y) as one batched matrix product, (n, x, k) @ (n, k, y)
        joint = torch.bmm((log_attn[..., None] + qx).exp().transpose(1, 2), qy.exp())
        out["point"] = joint.reshape(len(c), -1).clamp(min=1e-30).log()
        return out

    def token_logprobs(self, obs: dict, actions) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of the tokens of ``actions`` (n, 3): the type token, then the type's
        arguments (:data:`ACTION_TOKENS`), as (n, 3) with a (n, 3) mask of the tokens that exist."""
        actions = torch.as_tensor(np.asarray(actions), dtype=torch.long).clone()
        out = self(obs, full_point=False)
        n = len(actions)
        # the click token's log-probability straight from the mixture, log sum_k a_k q_k(x) q_k(y),
        # O(K) per row instead of the whole N_BINS ** 2 table (equal to the table's entry, tested)
        log_attn, qx, qy = out["point_parts"]
        x, y = actions[:, 1].clamp(min=0), actions[:, 2].clamp(min=0)
        rows = torch.arange(n)
        point = torch.logsumexp(log_attn + qx[rows, :, x] + qy[rows, :, y], dim=1)
        flat = torch.cat([out[name] if name != "point" else torch.zeros(n, HEADS["point"]) for name in HEADS], dim=1)
        kinds = actions[:, 0]
        click = kinds == CLICK
        actions[click, 1] = actions[click, 1] * N_BINS + actions[click, 2]
        mask = _TOKEN_MASK[kinds]
        columns = _TOKEN_OFFSET[kinds] + torch.where(mask > 0, actions, 0)
        columns[:, 0] = kinds
        logp = flat.gather(1, columns)
        logp = torch.cat([logp[:, :1], torch.where(click, point, logp[:, 1])[:, None], logp[:, 2:]], dim=1)
        return logp * mask, mask

    @torch.no_grad()
    def sample(self, obs: dict, generator: torch.Generator | None = None, greedy: bool = False) -> np.ndarray:
        """Actions (n, 3) drawn token by token (the type, then its arguments); ``greedy`` takes the
        most likely token at each place (the single-try decoding of the evaluation). Sampling uses
        the Gumbel-max trick, argmax(log p + g) with g = -log(-log u), u ~ U(0, 1): an exact draw
        from each head's distribution, for every head from one uniform tensor (about 3x faster than
        a multinomial draw per head, which needed the probabilities exponentiated)."""
        if greedy:  # the mode of the click table needs the whole table
            out = self(obs)
            draws = {name: out[name].argmax(1) for name in HEADS}
        else:  # the click point as a mixture draw: element k ~ a, then x ~ q_k(x), y ~ q_k(y)
            out = self(obs, full_point=False)
            log_attn, qx, qy = out["point_parts"]

            def gumbel_argmax(logp):
                u = torch.rand(logp.shape, generator=generator).clamp_(min=1e-12, max=1 - 1e-7)
                return (logp - torch.log(-torch.log(u))).argmax(-1)

            draws = {name: gumbel_argmax(out[name]) for name in HEADS if name != "point"}
            rows = torch.arange(len(log_attn))
            k = gumbel_argmax(log_attn)
            draws["point"] = gumbel_argmax(qx[rows, k]) * N_BINS + gumbel_argmax(qy[rows, k])
        kinds = draws["kind"]
        actions = torch.full((len(kinds), 3), -1, dtype=torch.long)
        actions[:, 0] = kinds
        for kind, heads in ACTION_TOKENS.items():
            rows = kinds == kind
            for j, head in enumerate(heads, start=1):
                actions[rows, j] = draws[head][rows]
        click = kinds == CLICK
        actions[click, 2] = actions[click, 1] % N_BINS
        actions[click, 1] = actions[click, 1] // N_BINS
        return actions.numpy()


def _log_bins(centre: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
    """log q(bin) of a discretised Gaussian over the bin centres, mean ``centre``, sd ``width``
    (both (..., )), normalised over the bins: (..., N_BINS)."""
    z = (_BIN_CENTRES - centre[..., None]) / width.clamp(min=1e-3)[..., None]
    return torch.log_softmax(-0.5 * z ** 2, dim=-1)


def observe(rows: dict, prev: np.ndarray | None = None, idx=None) -> dict:
    """Tensors for :class:`GUIPolicy` from step rows (``record_episodes``' dict), optionally at
    ``idx`` and with another history ``prev`` (n, HISTORY_STEPS, 3) in place of the reference."""
    sel = slice(None) if idx is None else idx
    prev = rows["prev"][sel] if prev is None else prev
    return {"elements": torch.as_tensor(rows["elements"][sel], dtype=torch.float32),
            "mask": torch.as_tensor(rows["mask"][sel], dtype=torch.bool),
            "instruction": torch.as_tensor(rows["instruction"][sel], dtype=torch.float32),
            "history": torch.as_tensor(history_features(prev), dtype=torch.float32)}


# --------------------------------------------------------------------------------------------
# The three evaluation protocols (the kit's runners on MiniGUI)
# --------------------------------------------------------------------------------------------
# ``act(obs) -> actions (n, 3)`` is any agent: it gets :func:`observe`'s tensors (screen elements,
# instruction, history features) and returns integer actions; ``GUIPolicy`` gives one through
# ``lambda obs: policy.sample(obs, greedy=True)``.

def offline(act, rows: dict) -> dict:
    """Offline protocol: every step with the reference history phi(o_t, a_t). Per-step ``tm``,
    ``em``, the predictions, and the episode metrics."""
    pred = act(observe(rows))
    tm, em = step_match(to_kit(pred), gt_kit(rows))
    return {"tm": tm, "em": em, "pred": pred, **episode_metrics(em, rows["episode"])}


def semi_online(act, rows: dict) -> dict:
    """Semi-online protocol (SOEval): steps in order along the recorded track; the history of step
    t holds the model's own earlier actions where they were EM and the reference where not
    (:func:`method.soeval_history`). Per-step ``tm``, ``em``, predictions and episode metrics."""
    n_episodes = int(rows["episode"].max()) + 1
    history = np.full((n_episodes, HISTORY_STEPS, 3), -1)
    tm, em = np.zeros(len(rows["step"]), bool), np.zeros(len(rows["step"]), bool)
    pred = np.zeros((len(rows["step"]), 3), dtype=np.int64)
    gt = gt_kit(rows)
    for t in range(int(rows["step"].max()) + 1):
        idx = np.flatnonzero(rows["step"] == t)
        eps = rows["episode"][idx]
        pred[idx] = act(observe(rows, prev=history[eps], idx=idx))
        tm[idx], em[idx] = step_match(to_kit(pred[idx]), {k: v[idx] for k, v in gt.items()})
        kept = soeval_history(rows["action"][idx], pred[idx], em[idx])
        history[eps] = np.concatenate([history[eps, 1:], kept[:, None]], axis=1)
    return {"tm": tm, "em": em, "pred": pred, **episode_metrics(em, rows["episode"])}


def online(act, world: World, tasks: np.ndarray, device: str) -> dict:
    """Online protocol: every task closed loop on a :class:`Phone`, the agent's own history.
    ``success`` per task and ``steps`` taken."""
    phones = [Phone(world, t, device) for t in tasks]
    screens = [p.reset() for p in phones]
    history = np.full((len(tasks), HISTORY_STEPS, 3), -1)
    instructions = np.stack([_instruction(world, t) for t in tasks])
    active = np.arange(len(tasks))
    while len(active):
        obs = {"elements": torch.as_tensor(np.stack([screens[i][0] for i in active]), dtype=torch.float32),
               "mask": torch.as_tensor(np.stack([screens[i][1] for i in active]), dtype=torch.bool),
               "instruction": torch.as_tensor(instructions[active], dtype=torch.float32),
               "history": torch.as_tensor(history_features(history[active]), dtype=torch.float32)}
        actions = act(obs)
        still = []
        for i, action in zip(active, actions):
            history[i] = np.concatenate([history[i, 1:], action[None]], axis=0)
            if not phones[i].step(action):
                screens[i] = (phones[i]._feats, phones[i]._mask)
                still.append(i)
        active = np.array(still, dtype=np.int64)
    return {"success": np.array([p.success for p in phones], dtype=float),
            "steps": np.array([p.t for p in phones])}


def evaluate(act, world: World, tasks: np.ndarray, device: str) -> dict:
    """The kit's summary for one agent on one split: offline TM, EM, goal progress and success;
    SOEval EM and success; online success; and, from the offline steps, EM at the history-ambiguous
    (form) steps and the share of offline errors that are type mismatches (vs target mismatches)."""
    rows = record_episodes(world, tasks, device)
    off, semi, on = offline(act, rows), semi_online(act, rows), online(act, world, tasks, device)
    errors = ~off["em"]
    return {"tm": float(off["tm"].mean()), "em": float(off["em"].mean()),
            "goal_progress": float(off["goal_progress"].mean()), "success": float(off["success"].mean()),
            "soeval_em": float(semi["em"].mean()), "soeval_success": float(semi["success"].mean()),
            "online_success": float(on["success"].mean()),
            "em_ambiguous": float(off["em"][rows["ambiguous"]].mean()),
            "type_error_share": float((~off["tm"][errors]).mean()) if errors.any() else float("nan")}


def steps_dataset(seed: int, n_tasks: int = 200, device: str = "phone"):
    """The reference steps of ``n_tasks`` training-app tasks as a ``datasets.Dataset`` (one row
    per step: episode, step, screen, the instruction in words, the reference action in the kit's
    form, the target box), through the shared cache."""
    from replib.core.data import cached_dataset

    def build():
        world = make_world(seed)
        tasks = sample_tasks(world, world.apps("train"), n_tasks, np.random.default_rng([seed, 3]))
        rows = record_episodes(world, tasks, device)
        kit = to_kit(rows["action"])
        out = []
        for i in range(len(rows["step"])):
            a, b, r, w = (int(v) for v in rows["task"][i])
            out.append({"episode": int(rows["episode"][i]), "step": int(rows["step"][i]),
                        "screen": ("home", "main", "list", "form")[int(rows["screen"][i])],
                        "instruction": f"open {LETTERS[world.names[a, 0]]}{LETTERS[world.names[a, 1]]}, "
                                       f"button glyph {world.buttons[a, b]}, row glyph {world.lists[a, b, r]}, "
                                       f"type '{WORDS[w]}'",
                        "action": str(kit["type"][i]), "point": [float(v) for v in np.nan_to_num(kit["point"][i], nan=-1)],
                        "direction": str(kit["direction"][i]), "text": str(kit["text"][i]),
                        "box": [float(v) for v in rows["box"][i]]})
        return out

    return cached_dataset("hypertrack_steps", {"seed": seed, "n_tasks": n_tasks, "device": device}, build)
