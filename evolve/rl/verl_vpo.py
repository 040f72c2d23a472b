"""veRL integration (optional extra, ``pip install 'evolve[verl]'``): VPO, Multi-RLVR and Max@K as veRL estimators.

Importing this module registers ``VPO_NAME`` ("vpo"), ``MULTI_RLVR_NAME`` ("multi_rlvr") and ``MAX_AT_K_NAME``
("max_at_k"), overridable with the environment variables EVOLVE_VERL_VPO_NAME / EVOLVE_VERL_MULTI_RLVR_NAME /
EVOLVE_VERL_MAX_AT_K_NAME, with veRL's registry (``verl.trainer.ppo.core_algos.register_adv_est``), so that
``algorithm.adv_estimator=vpo`` finds them. Written against veRL 0.9.1. The per-group maths is evolve.rl.advantages
(vpo_advantages, multi_rlvr_advantages, max_at_k_advantages); this module only groups veRL's batch by prompt uid and
broadcasts each response's scalar over its response tokens.

Max@K is a one-answer method: it reads veRL's own scalar reward (``token_level_rewards`` summed over the response,
the reward function's ``score``: the declared scalar of the answer), as the VPO authors' veRL does, so it needs
neither the wrapper below nor the reward vectors. Its k is ``algorithm.vpo.max_at_k_k`` (default max(2, G // 2)).

Reward vectors. veRL's reward is one scalar per response, at its last token; VPO needs each response's ``m x d``
matrix. evolve.rl.verl_reward's ``compute_score`` returns it as ``reward_vectors`` (a JSON string) beside ``score``;
veRL copies every key of that dict into ``DataProto.non_tensor_batch`` (agent_loop.py, ray_trainer.py).

Wiring. veRL 0.9.1's ``ray_trainer.compute_advantage`` passes a registered estimator only ``token_level_rewards``,
``response_mask``, ``config`` (the ``algorithm`` config), ``index`` (``non_tensor_batch["uid"]``) and, when present,
``reward_baselines``; ``non_tensor_batch`` goes to GDPO alone (veRL PR #7473, open, would pass it to any estimator
that accepts it). So importing this module also wraps ``compute_advantage`` (``patch_compute_advantage``): for our
two names it calls the estimator with ``non_tensor_batch`` and ``step=meta_info["global_steps"]``; every other
estimator goes to veRL's function untouched. That reaches the legacy trainer (``trainer.use_v1=False``), which
keeps reward extras in the batch. The v1 trainer (veRL's default) fetches only uid, masks, log-probs and
``rm_scores`` from its TransferQueue before computing advantages, so the vectors never reach any estimator there
(GDPO has the same limit); the estimator then stops with an error that says so.

The module must be imported in veRL's driver process, where advantages are computed: set
``VERL_USE_EXTERNAL_MODULES=evolve.rl.verl_vpo`` (veRL imports it on ``import verl``, in every Ray worker too), or
install evolve with the ``verl.plugins`` entry point (evolve_vpo = "evolve.rl.verl_vpo").

Seeds and options: ``algorithm.vpo.{seed, k, alpha, sampler, eps}`` (add them with ``+algorithm.vpo.seed=0``;
defaults 0, 100, 1.0, "mc", 1e-6). Group j of step s draws its Dirichlet weights with
``evolve.seeds.derive(seed, VPO_WEIGHTS, s, j)``, j counting uids in order of first appearance in the batch. s is the
batch's ``meta_info["global_steps"]`` when set; veRL 0.9.1's legacy trainer sets it only on the generation batch, so
there a per-process call counter (one call per step) numbers the steps, and a resumed run starts it again at 1.
Multi-RLVR uses only ``eps``.

VPO and Multi-RLVR read only the reward vectors, never ``token_level_rewards``: an in-reward KL penalty
(``algorithm.use_kl_in_reward``) would be dropped without a word, so it is refused; use the KL loss
(``actor_rollout_ref.actor.use_kl_loss=True``), as the paper does.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from evolve.rl.advantages import (
    default_max_at_k,
    max_at_k_advantages,
    multi_rlvr_advantages,
    vpo_advantages,
)
from evolve.rl.verl_reward import (
    DUPLICATES_KEY,
    VECTORS_KEY,
    WEIGHTS_KEY,
    decode_flags,
    decode_vectors,
    decode_weights,
)
from evolve.seeds import VPO_WEIGHTS, derive

try:
    from verl.trainer.ppo import core_algos
except ImportError as exc:  # pragma: no cover - exercised only where veRL is absent
    raise ImportError(
        f"evolve.rl.verl_vpo needs veRL ({exc}); install it with: pip install 'evolve[verl]' "
        "(or bash scripts/install/install_verl.sh for a CPU venv)"
    ) from exc

VPO_NAME = os.environ.get("EVOLVE_VERL_VPO_NAME", "vpo")
MULTI_RLVR_NAME = os.environ.get("EVOLVE_VERL_MULTI_RLVR_NAME", "multi_rlvr")
MAX_AT_K_NAME = os.environ.get("EVOLVE_VERL_MAX_AT_K_NAME", "max_at_k")
CONFIG_SECTION = "vpo"  # algorithm.vpo.*
DEFAULTS: dict[str, Any] = {"seed": 0, "k": 100, "alpha": 1.0, "sampler": "mc", "eps": 1e-6, "max_at_k_k": None}
V1_HINT = (
    "veRL's v1 trainer does not hand reward extras to advantage estimators: run with trainer.use_v1=False, "
    "import evolve.rl.verl_vpo in the driver (VERL_USE_EXTERNAL_MODULES=evolve.rl.verl_vpo), and use "
    "evolve.rl.verl_reward's compute_score as reward.custom_reward_function"
)
_counters: dict[str, itertools.count[int]] = {}


def options(config: Any, reads_vectors: bool = True) -> dict[str, Any]:
    """``DEFAULTS`` overlaid with ``config[CONFIG_SECTION]`` (config: the algorithm DictConfig, a dict or None).

    ``reads_vectors``: the estimator ignores ``token_level_rewards``, so an in-reward KL penalty is refused."""
    readable = config is not None and hasattr(config, "get")
    if reads_vectors and readable and config.get("use_kl_in_reward", False):
        raise ValueError("VPO / Multi-RLVR ignore token_level_rewards, so algorithm.use_kl_in_reward would be "
                         "dropped: set it to False and use actor_rollout_ref.actor.use_kl_loss=True instead")
    section = config.get(CONFIG_SECTION, None) if readable else None
    chosen = dict(DEFAULTS)
    for key, value in (section or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"unknown option algorithm.{CONFIG_SECTION}.{key}: use {', '.join(DEFAULTS)}")
        chosen[key] = value
    return chosen


def group_rows(index: Sequence[Any]) -> list[list[int]]:
    """Row numbers per group, groups in order of their uid's first appearance."""
    rows: dict[Any, list[int]] = {}
    for row, uid in enumerate(index):
        rows.setdefault(uid, []).append(row)
    return list(rows.values())


def group_rewards(entries: Sequence[Any], rows: Sequence[int]) -> NDArray[np.float64]:
    """``[G, m, d]`` for one group; a response with fewer answer rows is padded with zero rows (missing answers)."""
    matrices = [decode_vectors(entries[row]) for row in rows]
    dims = {matrix.shape[1] for matrix in matrices}
    if len(dims) != 1:
        raise ValueError(f"responses of one prompt have reward vectors of different lengths {sorted(dims)}")
    m = max(matrix.shape[0] for matrix in matrices)
    return np.stack([np.pad(matrix, ((0, m - matrix.shape[0]), (0, 0))) for matrix in matrices])


def group_duplicates(entries: Sequence[Any], rows: Sequence[int], m: int) -> NDArray[np.bool_]:
    """``[G, m]`` duplicate flags for one group (a response with fewer answers is padded with False)."""
    return np.stack([decode_flags(entries[row], m) for row in rows])


def group_weights(entries: Sequence[Any], rows: Sequence[int]) -> NDArray[np.float64]:
    """``[d]``: the declared objective weights, the same for every response of one prompt."""
    weights = [decode_weights(entries[row]) for row in rows]
    if any(w.shape != weights[0].shape or not np.array_equal(w, weights[0]) for w in weights):
        raise ValueError("responses of one prompt carry different objective_weights")
    return weights[0]


def _broadcast(scalars: NDArray[np.float64], like: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    values = torch.as_tensor(scalars, dtype=like.dtype if like.is_floating_point() else torch.float32)
    return values.to(mask.device).unsqueeze(-1) * mask.to(values.dtype)


def _grouped(
    name: str,
    per_group: Callable[[Mapping[str, Any], list[int], int, int], NDArray[np.float64]],
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None,
    non_tensor_batch: Mapping[str, Any] | None,
    step: int | None,
    needs: tuple[str, ...] = (VECTORS_KEY,),
) -> tuple[torch.Tensor, torch.Tensor]:
    if non_tensor_batch is None or any(key not in non_tensor_batch for key in needs):
        held = sorted(non_tensor_batch) if non_tensor_batch is not None else "no non_tensor_batch"
        wanted = ", ".join(repr(key) for key in needs)
        raise ValueError(f"advantage estimator {name!r} needs non_tensor_batch[{wanted}], got {held}. {V1_HINT}")
    if index is None:
        raise ValueError(f"advantage estimator {name!r} needs index (veRL's non_tensor_batch['uid']) to group by")
    entries = non_tensor_batch[VECTORS_KEY]
    if len(entries) != len(index) or len(index) != response_mask.shape[0]:
        raise ValueError(f"{len(entries)} reward vectors, {len(index)} uids, {response_mask.shape[0]} responses")
    if step is None:
        step = next(_counters.setdefault(name, itertools.count(1)))
    scalars = np.zeros(len(index))
    with torch.no_grad():
        for position, rows in enumerate(group_rows(index)):
            scalars[rows] = per_group(non_tensor_batch, rows, int(step), position)
        advantages = _broadcast(scalars, token_level_rewards, response_mask)
    return advantages, advantages


def compute_vpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None = None,
    config: Any = None,
    non_tensor_batch: Mapping[str, Any] | None = None,
    step: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """veRL estimator: per uid group, evolve's ``vpo_advantages`` on the ``[G, m, d]`` reward vectors.

    Returns (advantages, returns), both ``[B, T]``: each response's scalar times its response_mask (0 on padding),
    like veRL's GRPO. ``token_level_rewards`` only sets the dtype; the rewards come from ``non_tensor_batch``.
    """
    chosen = options(config)
    seed = int(chosen["seed"])

    def per_group(batch: Mapping[str, Any], rows: list[int], at: int, position: int) -> NDArray[np.float64]:
        return vpo_advantages(group_rewards(batch[VECTORS_KEY], rows), seed=derive(seed, VPO_WEIGHTS, at, position),
                              k=int(chosen["k"]), alpha=float(chosen["alpha"]), sampler=chosen["sampler"],
                              eps=float(chosen["eps"]))

    return _grouped(VPO_NAME, per_group, token_level_rewards, response_mask, index, non_tensor_batch, step)


def compute_multi_rlvr_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None = None,
    config: Any = None,
    non_tensor_batch: Mapping[str, Any] | None = None,
    step: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """veRL estimator: per uid group, evolve's ``multi_rlvr_advantages``: duplicate answers left out, the distinct
    answers' declared scalars (the problem's weights) summed, then GRPO."""
    eps = float(options(config)["eps"])

    def per_group(batch: Mapping[str, Any], rows: list[int], at: int, position: int) -> NDArray[np.float64]:
        rewards = group_rewards(batch[VECTORS_KEY], rows)
        return multi_rlvr_advantages(rewards, group_weights(batch[WEIGHTS_KEY], rows),
                                     group_duplicates(batch[DUPLICATES_KEY], rows, rewards.shape[1]), eps=eps)

    return _grouped(MULTI_RLVR_NAME, per_group, token_level_rewards, response_mask, index, non_tensor_batch, step,
                    needs=(VECTORS_KEY, DUPLICATES_KEY, WEIGHTS_KEY))


def compute_max_at_k_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """veRL estimator: per uid group, evolve's ``max_at_k_advantages`` on veRL's scalar reward (summed over tokens).

    A group of one response gets 0 (the authors' veRL skips it); k defaults to max(2, G // 2)."""
    chosen = options(config, reads_vectors=False)
    if index is None:
        raise ValueError(f"advantage estimator {MAX_AT_K_NAME!r} needs index (veRL's uid) to group by")
    scores = token_level_rewards.detach().sum(dim=-1).to(torch.float64).cpu().numpy()
    scalars = np.zeros(len(index))
    for rows in group_rows(index):
        if len(rows) > 1:
            k = chosen["max_at_k_k"] if chosen["max_at_k_k"] is not None else default_max_at_k(len(rows))
            scalars[rows] = max_at_k_advantages(scores[rows], int(k), eps=float(chosen["eps"]))
    with torch.no_grad():
        advantages = _broadcast(scalars, token_level_rewards, response_mask)
    return advantages, advantages


ESTIMATORS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    VPO_NAME: compute_vpo_advantage,
    MULTI_RLVR_NAME: compute_multi_rlvr_advantage,
}  # the estimators that need non_tensor_batch (patch_compute_advantage); Max@K reads veRL's own reward
REGISTERED: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    **ESTIMATORS, MAX_AT_K_NAME: compute_max_at_k_advantage}


def register() -> None:
    """Register ``REGISTERED`` with veRL's registry; idempotent, and an error if a name is someone else's."""
    for name, function in REGISTERED.items():
        held = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if held is not None and held is not function:
            raise ValueError(f"veRL already has an advantage estimator {name!r} ({held.__module__}.{held.__name__}); "
                             "pick another name with EVOLVE_VERL_VPO_NAME / EVOLVE_VERL_MULTI_RLVR_NAME / "
                             "EVOLVE_VERL_MAX_AT_K_NAME")
        core_algos.register_adv_est(name)(function)


def _name(estimator: Any) -> str:
    return str(getattr(estimator, "value", estimator))


def patch_compute_advantage() -> None:
    """Wrap veRL's ``ray_trainer.compute_advantage`` so our estimators get ``non_tensor_batch`` and the step.

    Idempotent. Also rebinds the name in modules that imported it already (v1.utils, experimental trainers);
    modules imported later pick up the wrapper from ray_trainer.
    """
    from verl.trainer.ppo import ray_trainer

    original = ray_trainer.compute_advantage
    if getattr(original, "evolve_original", None) is not None:
        return
    signature = inspect.signature(original)

    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        if _name(adv_estimator) not in ESTIMATORS:
            return original(data, adv_estimator, *args, **kwargs)
        bound = signature.bind(data, adv_estimator, *args, **kwargs)
        if "response_mask" not in data.batch.keys():
            data.batch["response_mask"] = ray_trainer.compute_response_mask(data)
        step = (data.meta_info or {}).get("global_steps")
        advantages, returns = ESTIMATORS[_name(adv_estimator)](
            token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch.get("uid"), config=bound.arguments.get("config"),
            non_tensor_batch=data.non_tensor_batch, step=None if step is None else int(step))
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    compute_advantage.evolve_original = original  # type: ignore[attr-defined]
    compute_advantage.__doc__ = original.__doc__
    for name, module in list(sys.modules.items()):  # __dict__, not getattr: no lazy imports set off
        if name.startswith("verl.") and vars(module).get("compute_advantage") is original:
            module.compute_advantage = compute_advantage  # type: ignore[attr-defined]


register()
patch_compute_advantage()
