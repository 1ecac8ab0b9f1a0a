"""The toy world of the RAST-MoE chapter: a grid city with demand regimes, a density-speed
congestion surrogate, zone-wise hold/release decisions and batched (Hungarian) matching.

Everything here is our choice (the paper's simulator, data and feature list
could not be read). Units: distances in km, times in seconds, one decision epoch = ``DT`` seconds.

* City: ``SIDE x SIDE`` zones of 1 km (Z = 16 at the default side 4), zone z at row z // SIDE,
  column z % SIDE.
* Regimes (:data:`REGIMES`): ``offpeak`` (uniform demand, uniform destinations) and three peaks in
  which requests originate mostly in a hotspot block of zones and end within ``peak_trip_km`` of
  their origin: ``peak_center`` (the four central
  zones), ``peak_corner`` (the top-left 2 x 2 block), and ``peak_edge`` (the bottom row, never seen
  in training: the unseen regime). A day (:func:`day_schedule`) runs offpeak, peak_center, offpeak,
  peak_corner in four equal segments; the unseen day replaces both peaks by ``peak_edge`` and scales
  all demand by 1.3 (our form of the abstracts' unseen regimes; the chapter's claim c2).
* Congestion (our analogue of the paper's MFD; its form is not stated): speed
  v = V_FREE max(0.2, 1 - rho / RHO_JAM) with rho the fleet's busy fraction plus a background density
  (0.1 in peaks, 0 off-peak); travel time = Manhattan distance / v. With short peak trips, pickups
  are a large share of a vehicle's busy time, so matching every epoch (long pickups) can lock a peak
  into a slow, "wild-goose chase" state that holding for larger batches relieves.
* Matching (paper, step 2; algorithm and radius not stated, our choice): the waiting
  requests of the released zones and all idle vehicles within ``RADIUS`` km (Manhattan) are matched
  by one minimum-total-pickup-distance assignment (``scipy.optimize.linear_sum_assignment``).
* A request waits until it is matched or until it has waited ``PATIENCE`` seconds (abandonment, the
  service violation).
* Per-epoch cost parts (:class:`StepInfo`): held requests x DT (the increment of matching delay),
  pickup seconds of this epoch's matches, abandonments and arrivals.

Contents: :data:`REGIMES`, :func:`day_schedule`, :class:`CityConfig`, :class:`RideHailingEnv`
(``reset``, ``step``, ``observe``), :func:`match_released` (step 2), :func:`speed_factor`,
:func:`evaluation_reward`, :func:`episode_metrics`, :func:`run_episode`, the heuristic policies
:func:`fixed_interval_policy` and :func:`threshold_policy`, and the oracle's rule
:func:`regime_switching_policy`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = [
    "DT", "PATIENCE", "RADIUS", "V_FREE", "RHO_JAM", "C0", "REGIMES", "REGIME_IDS", "N_ZONE_FEATURES",
    "N_GLOBAL_FEATURES", "CityConfig", "StepInfo", "day_schedule", "speed_factor", "match_released",
    "RideHailingEnv", "evaluation_reward", "episode_metrics", "run_episode", "fixed_interval_policy",
    "threshold_policy", "regime_switching_policy",
]

DT = 30.0  # seconds per decision epoch (the paper's 30 s epoch)
PATIENCE = 600.0  # a request abandons after waiting this long (service violation)
RADIUS = 2.5  # km, Manhattan: the matching radius
V_FREE = 8.0 / 1000.0  # km per second (28.8 km/h)
RHO_JAM = 1.5  # jam density of the speed relation
C0 = 600.0  # seconds per unit of cost in every reward (one patience)
REGIMES = ("offpeak", "peak_center", "peak_corner", "peak_edge")
REGIME_IDS = {name: i for i, name in enumerate(REGIMES)}
N_ZONE_FEATURES = 8
N_GLOBAL_FEATURES = 4


@dataclass(frozen=True)
class CityConfig:
    """The city's sizes and demand (requests per zone per minute). ``hot_rate`` is the rate of a
    hotspot zone in a peak, ``cold_rate`` that of the other zones in a peak, ``offpeak_rate`` the
    uniform off-peak rate; ``demand_scale`` multiplies all of them (1.3 on the unseen day)."""

    side: int = 4
    n_vehicles: int = 40
    epochs: int = 96
    offpeak_rate: float = 0.12
    hot_rate: float = 1.5
    cold_rate: float = 0.1
    peak_trip_km: float = 1.0
    demand_scale: float = 1.0
    unseen: bool = False

    @property
    def zones(self) -> int:
        return self.side * self.side


def hotspot_zones(regime: str, side: int) -> np.ndarray:
    """Boolean mask of the zones where a peak regime's requests concentrate (none off-peak)."""
    rows, cols = np.divmod(np.arange(side * side), side)
    half = side // 2
    if regime == "peak_center":
        low, high = max(half - 1, 0), half + (side % 2)
        return (rows >= low) & (rows <= high) & (cols >= low) & (cols <= high)
    if regime == "peak_corner":
        return (rows < max(half, 1)) & (cols < max(half, 1))
    if regime == "peak_edge":
        return rows == side - 1
    return np.zeros(side * side, dtype=bool)


def day_schedule(cfg: CityConfig) -> list[str]:
    """The regime of every epoch: four equal segments offpeak, peak, offpeak, peak (peak_center then
    peak_corner on a training day; peak_edge twice on the unseen day)."""
    peaks = ("peak_edge", "peak_edge") if cfg.unseen else ("peak_center", "peak_corner")
    segments = ("offpeak", peaks[0], "offpeak", peaks[1])
    return [segments[min(4 * t // cfg.epochs, 3)] for t in range(cfg.epochs)]


def speed_factor(busy_fraction: float, regime: str) -> float:
    """v / V_FREE = max(0.2, 1 - rho / RHO_JAM), rho = busy fraction + background density (0.1 in a
    peak): our Greenshields-style stand-in for the paper's MFD-consistent travel times."""
    rho = busy_fraction + (0.1 if regime != "offpeak" else 0.0)
    return max(0.2, 1.0 - rho / RHO_JAM)


def match_released(req_xy: np.ndarray, veh_xy: np.ndarray, radius: float = RADIUS):
    """Step 2 of the MDP (batched matching of the released zones): the minimum-total-distance
    assignment of requests (rows of ``req_xy``) to idle vehicles (rows of ``veh_xy``), pairs farther
    than ``radius`` (Manhattan km) forbidden. Returns (request indices, vehicle indices, distances)
    of the matched pairs."""
    if len(req_xy) == 0 or len(veh_xy) == 0:
        empty = np.zeros(0, dtype=int)
        return empty, empty, np.zeros(0)
    dist = np.abs(req_xy[:, None, :] - veh_xy[None, :, :]).sum(-1)
    cost = np.where(dist <= radius, dist, 1e6)
    rows, cols = linear_sum_assignment(cost)
    keep = dist[rows, cols] <= radius
    return rows[keep], cols[keep], dist[rows[keep], cols[keep]]


@dataclass
class StepInfo:
    """What one epoch did: requests held (still waiting after the decision), pickup seconds and
    matching delays (seconds) of the requests matched, abandonments, arrivals and the regime; the
    ``*_z`` arrays split held requests, pickup seconds and abandonments by the requests' zone."""

    held: int
    pickup: np.ndarray
    match_delay: np.ndarray
    abandoned: int
    arrived: int
    regime: str
    held_z: np.ndarray
    pickup_z: np.ndarray
    abandoned_z: np.ndarray


@dataclass
class RideHailingEnv:
    """One city (see the module docstring). ``reset(rng)`` starts a day; ``step(action)`` applies a
    zone-wise release vector a in {0, 1}^Z (1 = match now) and returns a :class:`StepInfo`;
    ``observe()`` gives (zone features (Z, 8), global features (4,))."""

    cfg: CityConfig = field(default_factory=CityConfig)

    def reset(self, rng: np.random.Generator):
        cfg = self.cfg
        self.rng = rng
        self.t = 0
        self.schedule = day_schedule(cfg)
        self.veh_xy = rng.uniform(0, cfg.side, size=(cfg.n_vehicles, 2))
        self.veh_free = np.zeros(cfg.n_vehicles)  # time (s) when each vehicle is idle again
        self.req_xy = np.zeros((0, 2))
        self.req_dest = np.zeros((0, 2))
        self.req_zone = np.zeros(0, dtype=int)
        self.req_wait = np.zeros(0)
        self.last_arrivals = np.zeros(cfg.zones)
        self.speed = 1.0
        self._arrive()
        return self.observe()

    @property
    def regime(self) -> str:
        return self.schedule[min(self.t, self.cfg.epochs - 1)]

    @property
    def done(self) -> bool:
        return self.t >= self.cfg.epochs

    def _rates(self, regime: str) -> np.ndarray:
        cfg = self.cfg
        if regime == "offpeak":
            rates = np.full(cfg.zones, cfg.offpeak_rate)
        else:
            rates = np.where(hotspot_zones(regime, cfg.side), cfg.hot_rate, cfg.cold_rate)
        return rates * cfg.demand_scale * DT / 60.0

    def _arrive(self) -> None:
        """Poisson arrivals of the current epoch's regime, uniform positions inside their zone;
        destinations uniform over the city off-peak, within ``peak_trip_km`` of the origin in a peak."""
        cfg, rng = self.cfg, self.rng
        counts = rng.poisson(self._rates(self.regime))
        zones = np.repeat(np.arange(cfg.zones), counts)
        corner = np.stack(np.divmod(zones, cfg.side), axis=1)[:, ::-1].astype(float)  # (x = col, y = row)
        xy = corner + rng.uniform(0, 1, size=(len(zones), 2))
        if self.regime == "offpeak":
            dest = rng.uniform(0, cfg.side, size=(len(zones), 2))
        else:
            step = rng.uniform(-cfg.peak_trip_km, cfg.peak_trip_km, size=(len(zones), 2))
            dest = np.clip(xy + step, 0, cfg.side)
        self.req_xy = np.concatenate([self.req_xy, xy])
        self.req_dest = np.concatenate([self.req_dest, dest])
        self.req_zone = np.concatenate([self.req_zone, zones])
        self.req_wait = np.concatenate([self.req_wait, np.zeros(len(zones))])
        self.last_arrivals = counts.astype(float)
        self.arrived_now = int(counts.sum())

    def idle_mask(self) -> np.ndarray:
        return self.veh_free <= self.t * DT

    def step(self, action) -> StepInfo:
        """Release the zones with action 1 (matching, step 2), hold the rest, drop requests whose
        wait reaches PATIENCE, move time on one epoch and draw the next arrivals."""
        cfg = self.cfg
        action = np.asarray(action).astype(bool)
        now = self.t * DT
        regime, arrived = self.regime, self.arrived_now
        released = np.flatnonzero(action[self.req_zone])
        idle = np.flatnonzero(self.idle_mask())
        r, v, dist = match_released(self.req_xy[released], self.veh_xy[idle])
        req, veh = released[r], idle[v]
        speed = V_FREE * self.speed
        pickup = dist / speed
        trip = np.abs(self.req_xy[req] - self.req_dest[req]).sum(-1) / speed
        self.veh_free[veh] = now + pickup + trip
        self.veh_xy[veh] = self.req_dest[req]
        match_delay = self.req_wait[req].copy()
        keep = np.ones(len(self.req_zone), dtype=bool)
        keep[req] = False
        self.req_wait[keep] += DT
        abandon = keep & (self.req_wait >= PATIENCE)
        held = int(keep.sum())
        z = cfg.zones
        by_zone = dict(held_z=np.bincount(self.req_zone[keep], minlength=z),
                       pickup_z=np.bincount(self.req_zone[req], weights=pickup, minlength=z),
                       abandoned_z=np.bincount(self.req_zone[abandon], minlength=z))
        keep &= ~abandon
        for name in ("req_xy", "req_dest", "req_zone", "req_wait"):
            setattr(self, name, getattr(self, name)[keep])
        self.t += 1
        busy = 1.0 - self.idle_mask().mean()
        self.speed = speed_factor(busy, self.regime)
        if not self.done:
            self._arrive()
        return StepInfo(held=held, pickup=pickup, match_delay=match_delay, abandoned=int(abandon.sum()),
                        arrived=arrived, regime=regime, **by_zone)

    def observe(self):
        """State features (our choice; the paper's list is not stated). Per zone: waiting requests / 5,
        oldest wait / PATIENCE, idle vehicles in the zone / 5, idle vehicles within RADIUS of the zone
        centre / 20, this epoch's arrivals / 5, speed factor, zone column and row / side. Global:
        busy fraction, all waiting / 20, all of this epoch's arrivals / 20, speed factor. No clock
        feature: the regime (a fixed function of the time of day) can only be read from the demand,
        supply and congestion it causes, so a router cannot specialise by reading the clock."""
        cfg = self.cfg
        z = cfg.zones
        waiting = np.bincount(self.req_zone, minlength=z).astype(float)
        oldest = np.zeros(z)
        np.maximum.at(oldest, self.req_zone, self.req_wait)
        idle = self.idle_mask()
        vxy = self.veh_xy[idle]
        vzone = np.clip(vxy[:, 1].astype(int), 0, cfg.side - 1) * cfg.side + np.clip(vxy[:, 0].astype(int), 0, cfg.side - 1)
        idle_in = np.bincount(vzone, minlength=z).astype(float)
        rows, cols = np.divmod(np.arange(z), cfg.side)
        centres = np.stack([cols + 0.5, rows + 0.5], axis=1)
        near = (np.abs(centres[:, None, :] - vxy[None, :, :]).sum(-1) <= RADIUS).sum(1).astype(float)
        zone_feats = np.stack([waiting / 5, oldest / PATIENCE, idle_in / 5, near / 20, self.last_arrivals / 5,
                               np.full(z, self.speed), cols / cfg.side, rows / cfg.side], axis=1)
        global_feats = np.array([1.0 - idle.mean(), waiting.sum() / 20, self.last_arrivals.sum() / 20, self.speed])
        return zone_feats.astype(np.float32), global_feats.astype(np.float32)


def evaluation_reward(info: StepInfo) -> float:
    """The total reward used to compare policies (ours; the paper's evaluation reward is not stated):
    minus (held requests x DT + pickup seconds + PATIENCE per abandoned request) / C0, i.e. the 1:1
    matching:pickup cost with every abandonment charged one more patience."""
    return -(info.held * DT + float(info.pickup.sum()) + PATIENCE * info.abandoned) / C0


def episode_metrics(infos: list[StepInfo]) -> dict:
    """Totals of one day: total (evaluation) reward, mean matching delay and mean pickup delay of
    the matched requests (s), abandonment rate (abandoned / arrived), matched requests."""
    pickup = np.concatenate([i.pickup for i in infos])
    delay = np.concatenate([i.match_delay for i in infos])
    arrived = sum(i.arrived for i in infos)
    return {
        "reward": float(sum(evaluation_reward(i) for i in infos)),
        "match_delay": float(delay.mean()) if delay.size else float("nan"),
        "pickup_delay": float(pickup.mean()) if pickup.size else float("nan"),
        "abandon_rate": sum(i.abandoned for i in infos) / max(arrived, 1),
        "matched": int(pickup.size),
    }


def run_episode(env: RideHailingEnv, policy, rng: np.random.Generator) -> list[StepInfo]:
    """Play one day with ``policy(env, obs) -> action`` (a 0/1 vector over zones); the StepInfos."""
    obs = env.reset(rng)
    infos = []
    while not env.done:
        infos.append(env.step(policy(env, obs)))
        if not env.done:
            obs = env.observe()
    return infos


def fixed_interval_policy(interval: int):
    """Heuristic baseline: release every zone every ``interval`` epochs (1 = match every epoch)."""
    def policy(env, obs):
        return np.full(env.cfg.zones, int(env.t % interval == interval - 1))
    return policy


def regime_switching_policy(offpeak_interval: int, peak_interval: int):
    """The regime-switching oracle's rule (ours): release every zone every ``offpeak_interval``
    epochs off-peak and every ``peak_interval`` epochs in a peak; it reads the true regime label,
    which no learned policy sees."""
    def policy(env, obs):
        h = offpeak_interval if env.regime == "offpeak" else peak_interval
        return np.full(env.cfg.zones, int(env.t % h == h - 1))
    return policy


def threshold_policy(max_wait: float = 120.0):
    """Heuristic baseline (ours, not one of the paper's): release a zone when its waiting requests are
    at least its idle vehicles nearby, or when its oldest request has waited ``max_wait`` seconds."""
    def policy(env, obs):
        zone_feats, _ = obs
        waiting, oldest, near = zone_feats[:, 0] * 5, zone_feats[:, 1] * PATIENCE, zone_feats[:, 3] * 20
        return ((waiting >= near) | (oldest >= max_wait)).astype(int)
    return policy
