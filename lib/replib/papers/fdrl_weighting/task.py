"""The toy world: Pendulum-v1 (the classic-control task of gymnasium, re-implemented here because
gymnasium is not installed; same equations and constants), its behaviour policies, the offline
client data sets of mixed quality, and the evaluation of many deterministic policies at once.

Contents: :func:`angle_normalize`, :func:`pendulum_step` (one step of Pendulum-v1, numpy or torch),
:func:`observe`, :func:`expert_action` (energy shaping + PD balance), :func:`behaviour_action`
(expert / medium / random), :func:`collect` (episodes of a behaviour policy), :data:`CLIENT_MIXES`,
:func:`client_datasets`, :func:`to_frame`, :func:`initial_states`, :func:`evaluate_actor` (a batch
of actors on fixed start states, in torch), :func:`reference_returns` and :func:`normalised_score`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

__all__ = [
    "MAX_TORQUE", "MAX_SPEED", "HORIZON", "GAMMA_DEFAULT",
    "angle_normalize", "pendulum_step", "observe", "expert_action", "behaviour_action", "collect",
    "CLIENT_MIXES", "client_datasets", "to_frame", "initial_states", "evaluate_actor",
    "reference_returns", "normalised_score",
]

G, MASS, LENGTH, DT = 10.0, 1.0, 1.0, 0.05   # Pendulum-v1 constants (g = 10 is gymnasium's default)
MAX_TORQUE, MAX_SPEED, HORIZON = 2.0, 8.0, 200
GAMMA_DEFAULT = 0.99


def angle_normalize(x):
    """Wrap an angle to [-pi, pi) (theta = 0 is upright)."""
    return ((x + np.pi) % (2 * np.pi)) - np.pi


def pendulum_step(theta, theta_dot, u):
    """One Pendulum-v1 step for arrays (numpy or torch) of states and torques: returns
    (theta', theta_dot', reward) with reward = -(wrap(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2), u
    clipped to [-2, 2] and the speed to [-8, 8]."""
    lib = torch if isinstance(theta, torch.Tensor) else np
    u = lib.clip(u, -MAX_TORQUE, MAX_TORQUE)
    reward = -(angle_normalize(theta) ** 2 + 0.1 * theta_dot ** 2 + 0.001 * u ** 2)
    new_dot = theta_dot + (3 * G / (2 * LENGTH) * lib.sin(theta) + 3.0 / (MASS * LENGTH ** 2) * u) * DT
    new_dot = lib.clip(new_dot, -MAX_SPEED, MAX_SPEED)
    return theta + new_dot * DT, new_dot, reward


def observe(theta, theta_dot):
    """The observation (cos theta, sin theta, theta_dot), stacked on a new last axis."""
    lib = torch if isinstance(theta, torch.Tensor) else np
    return lib.stack([lib.cos(theta), lib.sin(theta), theta_dot], -1)


def expert_action(theta, theta_dot):
    """The expert controller: PD balance u = -10 wrap(theta) - 2 theta_dot near the top (cos theta >
    0.85), energy pumping u = -2 sign(E) sign(theta_dot), E = theta_dot^2 / 30 + cos theta - 1,
    elsewhere; clipped to [-2, 2]."""
    energy = theta_dot ** 2 / 30 + np.cos(theta) - 1
    swing = -2.0 * np.sign(energy) * np.sign(theta_dot + 1e-9)
    balance = -10.0 * angle_normalize(theta) - 2.0 * theta_dot
    return np.clip(np.where(np.cos(theta) > 0.85, balance, swing), -MAX_TORQUE, MAX_TORQUE)


def behaviour_action(kind: str, theta, theta_dot, rng: np.random.Generator, expert_noise: float = 0.3):
    """The behaviour policy beta_k of a client: "expert" = expert + N(0, expert_noise^2); "medium" =
    per step, with probability 1/2 expert + N(0, 1), else uniform on [-2, 2]; "random" = uniform."""
    n = np.shape(theta)
    uniform = rng.uniform(-MAX_TORQUE, MAX_TORQUE, n)
    if kind == "random":
        return uniform
    expert = expert_action(theta, theta_dot)
    if kind == "expert":
        return np.clip(expert + expert_noise * rng.standard_normal(n), -MAX_TORQUE, MAX_TORQUE)
    if kind == "medium":
        noisy = np.clip(expert + rng.standard_normal(n), -MAX_TORQUE, MAX_TORQUE)
        return np.where(rng.random(n) < 0.5, noisy, uniform)
    raise ValueError(f"unknown behaviour {kind!r}; valid: expert, medium, random")


def collect(kind: str, episodes: int, rng: np.random.Generator, expert_noise: float = 0.3) -> dict:
    """``episodes`` Pendulum episodes (200 steps, start theta ~ U(-pi, pi), theta_dot ~ U(-1, 1)) of
    the behaviour policy ``kind``, run side by side. Returns float32 arrays ``obs`` (n, 3), ``action``
    (n, 1), ``reward`` (n,), ``next_obs`` (n, 3) and the mean episode ``return`` (a float); episodes
    end only by the time limit, so no transition is terminal."""
    theta = rng.uniform(-np.pi, np.pi, episodes)
    theta_dot = rng.uniform(-1.0, 1.0, episodes)
    rows = {"obs": [], "action": [], "reward": [], "next_obs": []}
    for _ in range(HORIZON):
        u = behaviour_action(kind, theta, theta_dot, rng, expert_noise)
        obs = observe(theta, theta_dot)
        theta, theta_dot, reward = pendulum_step(theta, theta_dot, u)
        for key, value in zip(rows, (obs, u[:, None], reward, observe(theta, theta_dot))):
            rows[key].append(value)
    data = {key: np.concatenate(value).astype(np.float32) for key, value in rows.items()}
    data["return"] = float(np.sum(rows["reward"]) / episodes)
    return data


# client kinds and their number of episodes (200 transitions each): our choice (the paper's clients are not stated)
CLIENT_MIXES = {
    # three small expert clients (3 episodes each, too few to learn well alone), a large medium
    # client and two large random ones: federation has something to add to the best client alone
    "split": [("expert", 3), ("expert", 3), ("expert", 3), ("medium", 25), ("random", 25), ("random", 25)],
    "mixed": [("expert", 25), ("medium", 2), ("random", 25), ("random", 25)],
    "six": [("expert", 25), ("expert", 25), ("medium", 2), ("medium", 2), ("random", 25), ("random", 25)],
}


def client_datasets(seed: int, mix: str = "mixed", episode_scale: float = 1.0, expert_noise: float = 0.3) -> list:
    """The offline data set D_k of every client of ``mix`` (a key of CLIENT_MIXES), each from its own
    seeded generator; ``episode_scale`` scales the episode counts (at least 1). A list of dicts as
    :func:`collect` returns, each with its ``kind`` added."""
    out = []
    for k, (kind, episodes) in enumerate(CLIENT_MIXES[mix]):
        rng = np.random.default_rng([seed, k, 7])
        data = collect(kind, max(1, round(episodes * episode_scale)), rng, expert_noise)
        data["kind"] = kind
        out.append(data)
    return out


def to_frame(data: dict) -> pd.DataFrame:
    """One client's transitions as a table (cos, sin, theta_dot, action, reward, next_*)."""
    obs, nxt = data["obs"], data["next_obs"]
    return pd.DataFrame({"cos": obs[:, 0], "sin": obs[:, 1], "theta_dot": obs[:, 2], "action": data["action"][:, 0],
                         "reward": data["reward"], "next_cos": nxt[:, 0], "next_sin": nxt[:, 1],
                         "next_theta_dot": nxt[:, 2]})


def initial_states(n: int, seed: int) -> np.ndarray:
    """``n`` fixed evaluation start states (theta, theta_dot), drawn as Pendulum-v1 does."""
    rng = np.random.default_rng([seed, 99])
    return np.stack([rng.uniform(-np.pi, np.pi, n), rng.uniform(-1.0, 1.0, n)], 1)


@torch.no_grad()
def evaluate_actor(actor_fn, starts: np.ndarray, n_policies: int) -> np.ndarray:
    """Undiscounted 200-step returns of ``n_policies`` deterministic policies from each start state:
    ``actor_fn(obs)`` maps a (n_policies, n_starts, 3) tensor to actions (n_policies, n_starts, 1).
    Returns an (n_policies, n_starts) float array."""
    theta = torch.as_tensor(starts[:, 0], dtype=torch.float32).expand(n_policies, -1).clone()
    theta_dot = torch.as_tensor(starts[:, 1], dtype=torch.float32).expand(n_policies, -1).clone()
    total = torch.zeros_like(theta)
    for _ in range(HORIZON):
        u = actor_fn(observe(theta, theta_dot))[..., 0]
        theta, theta_dot, reward = pendulum_step(theta, theta_dot, u)
        total += reward
    return total.double().numpy()


def reference_returns(starts: np.ndarray) -> dict:
    """Mean return of the noise-free expert controller and of uniform random actions (fixed seed)
    from ``starts``: the 100 and 0 of :func:`normalised_score` (D4RL's convention)."""
    rng = np.random.default_rng(0)
    out = {}
    for kind in ("expert", "random"):
        theta, theta_dot = starts[:, 0].copy(), starts[:, 1].copy()
        total = np.zeros(len(starts))
        for _ in range(HORIZON):
            u = expert_action(theta, theta_dot) if kind == "expert" else rng.uniform(-2, 2, len(starts))
            theta, theta_dot, reward = pendulum_step(theta, theta_dot, u)
            total += reward
        out[kind] = float(total.mean())
    return out


def normalised_score(ret, reference: dict):
    """D4RL-style normalised score 100 (R - R_random) / (R_expert - R_random)."""
    return 100.0 * (np.asarray(ret) - reference["random"]) / (reference["expert"] - reference["random"])
