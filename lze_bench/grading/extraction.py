"""Answer extraction: the string a response is graded on (strict `\\boxed{}`).

Rewards and evals use the strict rule by default: the last complete
`\\boxed{...}` (or `\\fbox{...}`), nothing else, because every prompt
template states that convention (extract_answer's docstring gives the
fallbacks). This is grading mode "boxed"; mode "math_verify" (math-verify
reads the whole response, as lighteval does) is math_verify_extraction.py.
"""

from __future__ import annotations

BOX_COMMANDS = ("\\boxed", "\\fbox")
MAX_BOX_TRIES = 8  # boxed occurrences tried from the end: keeps extraction linear in the response


def extract_answer(response: str) -> str | None:
    """The content of the last complete `\\boxed{...}` / `\\fbox{...}` (balanced braces).

    Fallbacks, in order: an earlier complete box when the last one is cut off
    (a truncated generation that re-states its answer) or empty (a response
    that echoes the prompt's "within \\boxed{}"); `\\boxed 5` (no braces, one
    token, trailing `.`/`$` dropped). At most the last MAX_BOX_TRIES boxes are
    tried, so the work stays linear in the response length. Nothing else: a response without a
    boxed answer has no answer (graded wrong), which is the convention every
    prompt template states; "Answer: X" lines are deliberately not read, so a
    policy is never rewarded for ignoring the format it was asked for.
    """
    if not isinstance(response, str):
        return None
    positions = []
    for command in BOX_COMMANDS:
        start = response.rfind(command)
        tries = 0
        while start >= 0 and tries < MAX_BOX_TRIES:
            positions.append((start, command))
            start = response.rfind(command, 0, start)
            tries += 1
    for start, command in sorted(positions, reverse=True)[:MAX_BOX_TRIES]:
        content = _braced_after(response, start + len(command))
        if content is not None and content.strip():
            return content.strip()
    return None


def _braced_after(text: str, index: int) -> str | None:
    while index < len(text) and text[index] == " ":
        index += 1
    if index >= len(text):
        return None
    if text[index] != "{":
        if text[index].isalpha():  # `\boxedfoo` is another command, not a box
            return None
        token = text[index:index + 200].split()
        return (token[0].rstrip(".$") or None) if token else None
    depth = 0
    for position in range(index, len(text)):
        char = text[position]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[index + 1 : position]
    return None  # unbalanced: cut off
