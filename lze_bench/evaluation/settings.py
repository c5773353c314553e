"""What an eval result is keyed by: checkpoint × benchmark × *settings* (design.md "The run directory").

Settings are every choice that changes which responses are sampled or how they
are scored, so two evaluations with equal settings are the same measurement
(re-running one is skipped) and two with different settings are two results,
kept side by side (in `evals.parquet` and under `evals/<checkpoint>/<key>/`):

    field            source                                  default
    split            eval.split ("" = the benchmark's own)   ""
    n_samples        eval.n_samples                          1
    temperature      eval.temperature (0 = greedy)           0.0
    top_p            eval.top_p                              1.0
    max_new_tokens   eval.max_new_tokens                     2048
    ks               eval.ks (pass@k / maj@k reported)       [1]
    limit            `limit`, else eval.limit (0 = all)      0
    prompt_template  template name (see `template_name`)     "default"
    chat_template    eval.use_chat_template                  true
    grading          eval.grading (boxed | math_verify)      "boxed"
    seed             one of eval.seeds, else `seed`              0

`settings_key` is the first 12 hex digits of the SHA-256 of these fields as
sorted JSON. Not in the key, because they name or run a measurement without
changing it: the suite's name (recorded as the `suite` column), the
benchmark list (the key is per benchmark), the generation engine (hf or vllm),
its dtype, batch size and parallelism, the device and the grading timeout.

Choices where the sources are silent:
- `prompt_template` is a name: "default" is each benchmark's own template
  (BenchmarkSpec.prompt_template: the problem, then "Please reason step by
  step, and put your final answer within \\boxed{}." in one user turn); a
  literal `eval.prompt_template` string is "custom-<8 hex of its SHA-256>";
  `eval.prompt` (a named convention, lze_bench.benchmarks.PROMPTS, e.g.
  "qwen25_math"; exclusive with a literal template) is its own name;
- `grading` is `eval.grading`: "boxed" (the last \\boxed{} of a response) or
  "math_verify" (math-verify reads the whole response; lze_bench.grading);
- `ks` is in the key although it only changes which metrics are computed from
  the same samples: a re-run asking for other k must compute them;
- seeds: `eval.seeds=[0,1,2]` is three results, one settings key per seed
  (`eval_settings(options, seed)`), never one key for the list. So each seed's
  samples are filed, skipped when finished and kept side by side like any
  other settings (`evals.parquet` has a row per seed, with its `seed`), a
  later `eval.seeds=[0,1,2,3]` evaluates seed 3 alone, and seed 0's result is
  the very one `seed=0` gives. The aggregate over the seeds (mean, per-seed
  values, spread, interval: metrics.summarize_seeds) is derived, never a
  measurement: it is written under `seeds-<group key>/` (outputs.py), the group
  key being `settings_key` over the same fields with `seed` = the sorted seed
  list (`group_settings`; with one seed, that seed's own key).
"""

from __future__ import annotations

import hashlib
import json

DEFAULT_TEMPLATE = "default"
DEFAULT_GRADING = "boxed"
KEY_FIELDS = ("split", "n_samples", "temperature", "top_p", "max_new_tokens", "ks", "limit", "prompt_template",
              "chat_template", "grading", "seed")


def template_name(suite) -> str:
    """The prompt template's name: a named template field, else "default" or "custom-<hash>"."""
    named = getattr(suite, "prompt", None)
    if isinstance(named, str) and named:
        return named
    literal = getattr(suite, "prompt_template", None)
    if not literal:
        return DEFAULT_TEMPLATE
    return "custom-" + hashlib.sha256(literal.encode()).hexdigest()[:8]


def eval_seeds(options) -> list[int]:
    """The sampling seeds of an `eval` command config: eval.seeds, else [seed]."""
    seeds = getattr(options.eval, "seeds", None)
    return [int(s) for s in seeds] if seeds else [int(options.seed)]


def eval_settings(options, seed: int | None = None) -> dict:
    """The key fields of an `eval` command config (objects, not a DictConfig), in KEY_FIELDS order, for one
    sampling seed (default: the first of `eval_seeds`)."""
    suite = options.eval
    return {
        "split": suite.split or "",
        "n_samples": int(suite.n_samples),
        "temperature": float(suite.temperature),
        "top_p": float(suite.top_p),
        "max_new_tokens": int(suite.max_new_tokens),
        "ks": sorted(int(k) for k in suite.ks),
        "limit": int(options.limit or suite.limit or 0),
        "prompt_template": template_name(suite),
        "chat_template": bool(suite.use_chat_template),
        "grading": str(getattr(suite, "grading", None) or DEFAULT_GRADING),
        "seed": int(eval_seeds(options)[0] if seed is None else seed),
    }


def seed_settings(options) -> list[dict]:
    """One settings dict per sampling seed, in eval.seeds order."""
    return [eval_settings(options, seed) for seed in eval_seeds(options)]


def group_settings(per_seed: list[dict]) -> dict:
    """The settings of a seed group: `seed` is the sorted seed list (an int with one seed, so the group key
    of one seed is its own settings key)."""
    seeds = sorted(s["seed"] for s in per_seed)
    return {**per_seed[0], "seed": seeds[0] if len(seeds) == 1 else seeds}


def settings_key(settings: dict) -> str:
    blob = json.dumps({k: settings[k] for k in KEY_FIELDS}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def describe(settings: dict) -> str:
    """One line a reader can check: `n=1 T=0 top_p=1 max_new_tokens=2048 limit=all seed=0 prompt=default ...`
    (`seeds=0,1,2` for a seed group)."""
    limit = settings.get("limit") or "all"
    seed = settings["seed"]
    seed = f"seeds={','.join(map(str, seed))}" if isinstance(seed, (list, tuple)) else f"seed={seed}"
    parts = [f"n={settings['n_samples']}", f"T={settings['temperature']:g}", f"top_p={settings['top_p']:g}",
             f"max_new_tokens={settings['max_new_tokens']}", f"limit={limit}", seed,
             f"prompt={settings['prompt_template']}", f"grading={settings['grading']}"]
    if settings.get("split"):
        parts.append(f"split={settings['split']}")
    if not settings.get("chat_template", True):
        parts.append("no chat template")
    return " ".join(parts)
