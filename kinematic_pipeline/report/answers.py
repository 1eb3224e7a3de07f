"""The report's first screen: one line per verdict question, its answer, the number behind it and the seeds'
agreement, cut from the verdict table (``stages.verdict.VERDICT_SCHEMA``'s columns) so a reader sees the answers
before the table that argues them. Pure text; no dagster here.
"""

from __future__ import annotations

import re

import polars as pl

ASIDE_CHARS = 25  # a parenthetical longer than this is a detail for the table, not the first screen
CLAUSE_CHARS = 110  # an answer or a number cut to at most this many characters (with an ellipsis)
AGREEMENT = (
    re.compile(r"\((\d+ of \d+) agree\)"),  # "seeds as replicates: +0.0012, -0.0003 (2 of 3 agree)"
    re.compile(r"seeds agreeing in sign (\d+%)"),  # the volatility task's pairs
)
OPENERS, CLOSERS = "([", ")]"
READ_COLUMNS = ("Question", "Test", "Statistic", "Answer")  # of ``stages.verdict.VERDICT_SCHEMA``


def first_clause(text: str) -> str:
    """``text`` up to its first "; " outside brackets (the whole when none), stripped."""
    depth = 0
    for i, char in enumerate(text):
        depth += (char in OPENERS) - (char in CLOSERS)
        if depth == 0 and text.startswith("; ", i):
            return text[:i].strip()
    return text.strip()


def drop_long_asides(text: str, limit: int = ASIDE_CHARS) -> str:
    """``text`` without its parentheticals (outermost, balanced) of more than ``limit`` characters."""
    out, start, depth = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            if depth == 0:
                open_at = i
            depth += 1
        elif char == ")" and depth:
            depth -= 1
            if depth == 0 and i - open_at - 1 > limit:
                out.append(text[start:open_at].rstrip())
                start = i + 1
    return re.sub(r"\s+([,.:;?])", r"\1", "".join(out) + text[start:]).strip()


def shorten(text: str, limit: int = CLAUSE_CHARS) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, an ellipsis marking the cut."""
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;: ") + "…"


def seeds_agreement(row: dict) -> str | None:
    """The seeds' agreement a row states ("2 of 3 agree", "agree in sign 67%"); None when its seeds were not
    replicates (one fit, or no seeds)."""
    text = " ".join(str(row.get(c) or "") for c in ("Statistic", "Interval or p-value", "Answer"))
    for pattern, form in zip(AGREEMENT, ("{} agree", "agree in sign {}")):
        found = pattern.search(text)
        if found:
            return form.format(found.group(1))
    return None


def _number(row: dict) -> str:
    return shorten(drop_long_asides(first_clause(row["Statistic"] or "-")))


def _answer(row: dict) -> str:
    return shorten(drop_long_asides(first_clause(row["Answer"] or "-")))


def _says_yes(row: dict) -> bool:
    return (row["Answer"] or "").startswith("yes")


def answer_line(question: str, rows: list[dict]) -> str:
    """One Markdown list item for ``question`` and its verdict ``rows``: "**question** answer — number (seeds: ...)".
    One row: its answer's first clause and its statistic's. Several (a family of tests): how many say yes, with the
    first that does (else the first row) named by its test, its answer and its statistic."""
    lead = next((r for r in rows if _says_yes(r)), rows[0])
    number, agreement = _number(lead), seeds_agreement(lead)
    answer = _answer(lead)
    if len(rows) > 1:
        yes, test = sum(map(_says_yes, rows)), drop_long_asides(lead["Test"].split(":", 1)[0])
        said = answer.removeprefix("yes").lstrip(": ")
        answer = f"yes in {yes} of {len(rows)} tests: {said}" if yes else f"no: none of its {len(rows)} tests says yes"
        number = f"{'' if yes else 'first, '}{test}: {number}"
    said = any(pattern.search(number) for pattern in AGREEMENT)  # the number already states it
    seeds = f" (seeds: {agreement})" if agreement and not said else ""
    return f"- **{drop_long_asides(question)}** {answer} — {number}{seeds}"


def answer_lines(verdict: pl.DataFrame) -> list[str]:
    """One line per question of ``verdict`` (rows sharing a question are one family), in the table's order
    (``answer_line``); none for a table without the columns they read (an older verdict's, a placeholder's): the
    report then opens on its context, as before."""
    if not set(READ_COLUMNS) <= set(verdict.columns):
        return []
    families: dict[str, list[dict]] = {}
    for row in verdict.iter_rows(named=True):
        families.setdefault(row["Question"], []).append(row)
    return [answer_line(question, rows) for question, rows in families.items()]


def answers_section(report: str) -> list[str]:
    """The lines of a report's "## Answers" section (``document.report_markdown``), its heading and note left out;
    none when it has none (a report written before the section, or without a verdict)."""
    lines = report.splitlines()
    if "## Answers" not in lines:
        return []
    start = lines.index("## Answers") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [line for line in lines[start:end] if line.startswith("- ")]


# What ``materialize`` prints at its end (issue 56: "the three lines that answer the report's questions"): per entry,
# the Answers line of the first of its questions the verdict holds (the volatility task's where the run has it, the
# next-day direction's otherwise); the report's first screen keeps every line
FIRST_SCREEN = (
    ("Does any strategy beat Buy & Hold",),
    ("Does a learned forecaster beat HAR and GARCH", "Does any model's score rank the next day's returns"),
    ("Do spline tokens beat finite differences", "Do spline tokens carry more information than finite differences"),
)


def first_screen(lines: list[str]) -> list[str]:
    """Of an Answers section's ``lines`` (``answers_section``), one per ``FIRST_SCREEN`` entry that any line answers:
    the first line asking its first question found, in the entry's order of preference."""
    out = []
    for questions in FIRST_SCREEN:
        found = next((line for q in questions for line in lines if q in _question(line)), None)
        if found is not None:
            out.append(found)
    return out


def _question(line: str) -> str:
    """The bold question of an Answers line ("- **question** answer — number"); "" when it has none."""
    parts = line.split("**")
    return parts[1] if len(parts) > 2 else ""
