"""Gold answers: a dataset's answer field -> the string graded against.

One style per benchmark (lze_bench.benchmarks.BenchmarkSpec.gold_style); the
styles follow each dataset's SOURCE.md (design.md "Data").
"""

from __future__ import annotations

from lze_bench.grading.extraction import extract_answer

GOLD_STYLES = ("auto", "gsm8k", "integer", "latex", "boxed")


def normalize_gold(value, style: str = "auto") -> str:
    """A dataset's gold answer as the string graded against (SOURCE.md of each dataset).

    gsm8k: the text after the last `####`, thousands commas removed (`#### 10,000` -> `10000`);
    integer (AIME, AMC): `"025"` -> `25`, `27.0` -> `27`; latex (MATH): stripped, outer `$` removed;
    boxed (a worked solution, MATH train): the last `\\boxed{}` of the text, via `extract_answer`;
    auto: a whole float -> integer, a string with `####` -> gsm8k, else latex.
    Raises ValueError (data.py adds file, line and field) when the value does not fit its style.
    """
    if style not in GOLD_STYLES:
        raise ValueError(f"unknown gold style {style!r} (choices: {', '.join(GOLD_STYLES)})")
    if value is None or isinstance(value, bool):
        raise ValueError(f"gold answer is {value!r}")
    if style == "auto":
        if isinstance(value, (int, float)):
            style = "integer" if float(value).is_integer() else "latex"
        else:
            style = "gsm8k" if "####" in str(value) else "latex"
    if style == "gsm8k":
        text = str(value)
        if "####" not in text:
            raise ValueError("no '#### <answer>' line in a GSM8K answer")
        text = text.rsplit("####", 1)[1].strip().replace(",", "")
    elif style == "boxed":
        text = extract_answer(str(value)) or ""
        if not text:
            raise ValueError("no \\boxed{} answer in the solution")
    elif style == "integer":
        try:
            number = float(str(value).strip().replace(",", ""))
        except ValueError:
            raise ValueError(f"expected an integer answer, got {value!r}") from None
        if not number.is_integer():
            raise ValueError(f"expected an integer answer, got {value!r}")
        text = str(int(number))
    else:
        text = str(value).strip()
        if len(text) >= 2 and text[0] == "$" and text[-1] == "$":
            text = text.strip("$").strip()
    if not text:
        raise ValueError("gold answer is empty")
    return text
