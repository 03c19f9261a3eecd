"""Countdown: reach a target from given numbers with + - * / and parentheses, each number used at most once.

Two jobs, both pure and deterministic: :func:`generate_puzzle` builds a puzzle with a guaranteed solution from
a seed string, and :func:`check_expression` grades an expression with a small recursive-descent parser and
exact rational arithmetic (``fractions.Fraction``). Nothing is ever passed to ``eval``: the grammar below
admits integers, the four binary operators and parentheses, and nothing else.

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := INTEGER | "(" expr ")"
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["MAX_EXPRESSION_CHARS", "CountdownPuzzle", "Verdict", "check_expression", "generate_puzzle"]

#: Longer expressions are refused before parsing (a real answer to a 6-number puzzle is ~40 characters).
MAX_EXPRESSION_CHARS = 500
_MAX_DEPTH = 50  # parentheses nesting; bounds the parser's recursion
_MAX_DIGITS = 12  # longer literals cannot be one of the given numbers (and int() of huge strings is slow)

# Unicode and LaTeX spellings of the operators that models commonly write, mapped to the ASCII ones.
_SPELLINGS = {
    "\\times": "*",
    "\\cdot": "*",
    "\\div": "/",
    "\\left": "",
    "\\right": "",
    "×": "*",
    "·": "*",
    "÷": "/",
    "−": "-",
    "–": "-",
    "[": "(",
    "]": ")",
}
_TOKEN = re.compile(r"\s*(?:(\d+)|(.))", re.DOTALL)


@dataclass(frozen=True)
class CountdownPuzzle:
    """The numbers, the target, and one known solution (the privileged reference answer)."""

    numbers: tuple[int, ...]
    target: int
    solution: str


@dataclass(frozen=True)
class Verdict:
    """Result of checking an expression: ``correct`` iff it is valid and equals the target exactly."""

    correct: bool
    message: str
    value: Fraction | None = None


class _Invalid(ValueError):
    pass


def generate_puzzle(
    seed: str, *, num_numbers: int = 4, max_number: int = 100, max_target: int = 1000
) -> CountdownPuzzle:
    """A puzzle built from ``seed`` alone: the same seed gives the same puzzle in every process.

    Draws ``num_numbers`` integers in ``[1, max_number]`` and combines all of them in random order with random
    operators; the result, when it is an integer in ``[2, max_target]`` not among the numbers, is the target.
    So every puzzle has a solution that uses each number exactly once.
    """
    if num_numbers < 2:
        raise ValueError(f"num_numbers must be >= 2, got {num_numbers}")
    if max_number < 1 or max_target < 2:
        raise ValueError(f"max_number must be >= 1 and max_target >= 2, got {max_number}, {max_target}")
    rng = random.Random(seed)  # str seeds hash with sha512: stable across processes and Python versions
    while True:
        numbers = [rng.randint(1, max_number) for _ in range(num_numbers)]
        terms = [(Fraction(n), str(n)) for n in numbers]
        while len(terms) > 1:
            left = terms.pop(rng.randrange(len(terms)))
            right = terms.pop(rng.randrange(len(terms)))
            op = rng.choice("+-*/")
            if op == "/" and right[0] == 0:
                op = "+"
            value = {"+": left[0] + right[0], "-": left[0] - right[0], "*": left[0] * right[0]}.get(op)
            if value is None:
                value = left[0] / right[0]
            terms.append((value, f"({left[1]} {op} {right[1]})"))
        value, text = terms[0]
        target = int(value) if value.denominator == 1 else -1
        if 2 <= target <= max_target and target not in numbers:
            return CountdownPuzzle(tuple(numbers), target, text[1:-1])


def check_expression(expression: str, numbers: tuple[int, ...] | list[int], target: int) -> Verdict:
    """Grade ``expression`` for the puzzle ``(numbers, target)``; never raises, never evaluates code.

    The message explains a rejection (bad character, number not given or used too often, division by zero,
    wrong value) without revealing a solution.
    """
    if not isinstance(expression, str) or not expression.strip():
        return Verdict(False, "The expression is empty.")
    if len(expression) > MAX_EXPRESSION_CHARS:
        return Verdict(False, f"The expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    text = expression
    for spelling, ascii_op in _SPELLINGS.items():
        text = text.replace(spelling, ascii_op)
    text = _strip_equals_target(text, target)
    try:
        tokens = _tokenize(text)
        parser = _Parser(tokens)
        value = parser.parse()
    except _Invalid as error:
        return Verdict(False, str(error))
    unknown = Counter(parser.used) - Counter(numbers)
    if unknown:
        number, _ = sorted(unknown.items())[0]
        given = Counter(numbers)[number]
        if given:
            return Verdict(False, f"It uses {number} more often than given ({given}×).", value)
        return Verdict(False, f"It uses {number}, which is not one of the given numbers.", value)
    if value != target:
        return Verdict(False, f"It evaluates to {_show(value)}, not {target}.", value)
    return Verdict(True, f"It evaluates to {target}.", value)


def _strip_equals_target(text: str, target: int) -> str:
    """``"(1 + 2) * 3 = 9"`` -> ``"(1 + 2) * 3"``: a trailing ``= number`` restates the result."""
    if "=" in text:
        left, _, right = text.rpartition("=")
        if right.strip().lstrip("-").isdigit():
            return left
    return text


def _tokenize(text: str) -> list[str]:
    tokens = []
    for match in _TOKEN.finditer(text):
        number, other = match.groups()
        if number is not None:
            if len(number) > _MAX_DIGITS:
                raise _Invalid(f"It contains the number {number[:12]}..., which is not one of the given numbers.")
            tokens.append(number)
        elif other is not None and not other.isspace():
            if other not in "+-*/()":
                if other == "^":
                    raise _Invalid("Powers are not allowed: use only + - * / and parentheses.")
                raise _Invalid(f"The character {other!r} is not allowed: use only integers, + - * / and parentheses.")
            tokens.append(other)
    if not tokens:
        raise _Invalid("The expression is empty.")
    return tokens


class _Parser:
    """Recursive descent over the token list; collects the integer literals it uses."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.position, self.depth = tokens, 0, 0
        self.used: list[int] = []

    def parse(self) -> Fraction:
        value = self._expr()
        if self.position != len(self.tokens):
            raise _Invalid(f"Unexpected {self.tokens[self.position]!r} after a complete expression.")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _expr(self) -> Fraction:
        value = self._term()
        while self._peek() in ("+", "-"):
            op = self.tokens[self.position]
            self.position += 1
            right = self._term()
            value = value + right if op == "+" else value - right
        return value

    def _term(self) -> Fraction:
        value = self._factor()
        while self._peek() in ("*", "/"):
            op = self.tokens[self.position]
            self.position += 1
            if op == "*" and self._peek() == "*":
                raise _Invalid("Powers are not allowed: use only + - * / and parentheses.")
            right = self._factor()
            if op == "/" and right == 0:
                raise _Invalid("It divides by zero.")
            value = value * right if op == "*" else value / right
        return value

    def _factor(self) -> Fraction:
        token = self._peek()
        if token is None:
            raise _Invalid("The expression ends too early.")
        self.position += 1
        if token == "(":
            self.depth += 1
            if self.depth > _MAX_DEPTH:
                raise _Invalid(f"Parentheses are nested more than {_MAX_DEPTH} deep.")
            value = self._expr()
            if self._peek() != ")":
                raise _Invalid("A parenthesis is not closed.")
            self.position += 1
            self.depth -= 1
            return value
        if token.isdigit():
            self.used.append(int(token))
            return Fraction(int(token))
        if token == "-":
            raise _Invalid("Unary minus is not allowed: each number is used as given, with binary + - * /.")
        raise _Invalid(f"Unexpected {token!r}.")


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
