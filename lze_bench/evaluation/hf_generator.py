"""The `hf` generation engine: transformers' `generate` ("Generation").

Batched with left padding, greedy (temperature 0) or sampling, CPU or
CUDA (device=auto picks CUDA when available); dtype auto = float32 on CPU,
bfloat16 on CUDA. Each batch is seeded (seed, batch index), so a run is
reproducible on one device. Generated tokens count up to and including the
first EOS. Prompts are rendered and fitted to the context window as
generator_base.py describes.
"""

from __future__ import annotations

import time

from lze_bench.errors import LzeBenchError
from lze_bench.evaluation.generator_base import Completion, GeneratorBase, PromptResult, Sampling


def _context_window(config, tokenizer) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and 0 < limit < 10**7 else None


class HFGenerator(GeneratorBase):
    name = "hf"

    def __init__(self, path: str, device: str = "cpu", dtype: str = "auto", batch_size: int = 8,
                 use_chat_template: bool = True):
        from lze_bench.hub import hub_model_path

        resolved = hub_model_path(path)  # an unreachable hub id fails in one line before torch loads
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise LzeBenchError("device=cuda but torch sees no CUDA device; pass device=cpu")
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        try:
            tokenizer = AutoTokenizer.from_pretrained(resolved)
            model = AutoModelForCausalLM.from_pretrained(resolved, dtype=getattr(torch, dtype))
        except (OSError, ValueError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise LzeBenchError(f"model {path!r} could not be loaded ({first}); pass model=PATH_OR_HF_ID") from None
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        super().__init__(tokenizer, _context_window(model.config, tokenizer), use_chat_template)
        self.dtype = dtype  # the dtype that runs (auto resolved above), recorded with every result
        self.torch = torch
        self.device = device
        self.model = model.to(device).eval()
        self.batch_size = batch_size
        eos = model.generation_config.eos_token_id
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}

    def generate(self, messages: list[str], sampling: Sampling, progress=None) -> list[PromptResult]:
        prompts = [self.render(m) for m in messages]
        encoded = [self.encode(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: -len(encoded[i]))  # similar lengths: less padding
        results: list[PromptResult | None] = [None] * len(prompts)
        for batch_index, start in enumerate(range(0, len(order), self.batch_size)):
            indices = order[start : start + self.batch_size]
            batch = self._generate_batch([encoded[i] for i in indices], sampling, batch_index)
            for i, result in zip(indices, batch):
                result.prompt = prompts[i]
                results[i] = result
            if progress is not None:
                progress(len(indices))
        return results  # type: ignore[return-value]

    def _generate_batch(self, ids_list: list[list[int]], sampling: Sampling, batch_index: int) -> list[PromptResult]:
        from transformers import GenerationConfig

        torch = self.torch
        new, fitted, truncated = self._fit(ids_list, sampling.max_new_tokens)
        width = max(len(ids) for ids in fitted)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in fitted], device=self.device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in fitted], device=self.device)
        greedy = sampling.temperature == 0
        config = GenerationConfig(
            max_new_tokens=new, do_sample=not greedy, num_return_sequences=sampling.n,
            temperature=None if greedy else sampling.temperature, top_p=None if greedy else sampling.top_p,
            top_k=None, pad_token_id=pad, eos_token_id=sorted(self.eos_ids) or None,
        )
        torch.manual_seed(sampling.seed * 1_000_003 + batch_index)
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
        self.generate_s += time.perf_counter() - started
        generated = output[:, width:].tolist()
        results = []
        for row, ids in enumerate(fitted):
            result = PromptResult("", len(ids), truncated[row], new)
            for sequence in generated[row * sampling.n : (row + 1) * sampling.n]:
                result.completions.append(self._completion(sequence))
            results.append(result)
        return results

    def _completion(self, sequence: list[int]) -> Completion:
        stop = next((i for i, token in enumerate(sequence) if token in self.eos_ids), None)
        kept = sequence if stop is None else sequence[: stop + 1]
        self.generated_tokens += len(kept)
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        return Completion(text, len(kept), "length" if stop is None else "stop")

    def close(self) -> None:
        self.model = None
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()
