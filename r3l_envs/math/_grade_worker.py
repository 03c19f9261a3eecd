"""The math-verify grading worker: run as ``python -m r3l_envs.math._grade_worker`` by :mod:`.grading`.

Protocol, JSON lines: it prints ``{"ready": true}`` once math-verify is imported, then answers each request
``{"id": n, "answer": str, "gold": [str, ...]}`` with ``{"id": n, "correct": bool, "status": "ok" | "error"}``.
It runs math-verify with its own ``signal.alarm`` timeouts off: the parent enforces a hard deadline by killing
this process, which also stops work stuck in C code (huge integer powers) that no signal can interrupt.
"""

from __future__ import annotations

import json
import sys


def _grade(answer: str, golds: list[str]) -> bool:
    from math_verify import parse, verify

    # Wrapping in $...$ makes math-verify read the text as LaTeX: e.g. \frac{\sqrt{3}}{2} vs \sqrt{3}/2 only
    # verifies when both sides are wrapped.
    target = parse(f"${answer}$", parsing_timeout=None)
    gold: list = []
    for text in golds:
        gold.extend(parse(f"${text}$", parsing_timeout=None))
    if not gold or not target:
        return False
    return bool(verify(gold, target, timeout_seconds=None))


def main() -> None:
    import math_verify  # noqa: F401  (import before announcing readiness: it is the slow part)

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        reply: dict = {"id": request["id"]}
        try:
            reply.update(correct=_grade(request["answer"], request["gold"]), status="ok")
        except Exception as error:  # a grader failure is an incorrect answer, reported to the parent
            reply.update(correct=False, status="error", error=f"{type(error).__name__}: {error}"[:500])
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
