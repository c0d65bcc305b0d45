"""Markdown for ``worktrial compare``: one section per pair, differences always B minus A."""

from __future__ import annotations

from worktrial.analysis.compare import Comparison, Difference, Efficiency, GroupComparison, PairComparison
from worktrial.analysis.planning import fewest_tasks
from worktrial.render.format import ci, num, p_value, plain
from worktrial.safe_text import for_markdown, markdown_code


def _ci(interval: tuple[float, float] | None) -> str:
    return ci(interval, signed=True)


def _plain(value: float | None, signed: bool = False, digits: int = 1) -> str:
    return plain(value, digits, signed)


_TESTS = {
    "exact McNemar": "McNemar",
    "sign-flip permutation (exact)": "sign-flip",
}


def _test(d: Difference) -> str:
    """Short name of the test behind the p-value; the full names are explained under the table."""
    if d.test is None:
        return "—"
    short = _TESTS.get(d.test.split(", over")[0])
    if short is None:
        short = "sign-flip MC" if "Monte Carlo" in d.test else d.test
    return short + (f" ({d.clusters} clusters)" if d.clusters is not None else "")


def _row(label: str, metric: str, d: Difference) -> str:
    interval = "— (no spread)" if d.ci95 is None and d.ci_note else _ci(d.ci95)
    holm = "primary" if d.role == "primary" else p_value(d.p_value_holm)
    return (
        f"| {label} | {metric} | {d.tasks} | {num(d.a)} | {num(d.b)} | {num(d.difference, signed=True)} "
        f"| {num(d.stderr)} | {interval} | {p_value(d.p_value)} | {holm} | {_test(d)} |"
    )


def _group_rows(g: GroupComparison, k: int) -> list[str]:
    label = "**overall**" if g.group == "overall" else for_markdown(g.group)
    return [
        _row(label, "pass@1", g.pass_at_1),
        _row(label, f"pass@{k}", g.pass_at_k),
        _row(label, f"pass^{k}", g.pass_power_k),
    ]


def _money(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "unknown"
    return f"{'+' if signed and value >= 0 else '-' if value < 0 else ''}${abs(value):.4f}"


def _per_solve(e: Efficiency) -> str:
    """Fully priced but never solved is not the same as unknown cost."""
    if e.cost_per_solve is None and e.unpriced_runs == 0 and e.cost_usd is not None:
        return "no solves"
    return _money(e.cost_per_solve)


def _pair_section(pair: PairComparison) -> list[str]:
    k = pair.k
    lines = [f"## B = {markdown_code(pair.b)} vs A = {markdown_code(pair.a)}", ""]
    lines += [f"- note: {for_markdown(n)}" for n in pair.notes]
    if pair.notes:
        lines.append("")
    lines += [
        "| group | metric | tasks | A | B | B − A | paired SE | 95% CI | p | Holm p | test |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    lines += _group_rows(pair.overall, k)
    for g in pair.categories:
        if pair.categories != [g] or g.tasks != pair.overall.tasks:
            lines += _group_rows(g, k)
    o = pair.overall
    mde1, mdek = o.pass_at_1.minimum_detectable, o.pass_at_k.minimum_detectable
    lines += [
        "",
        "- **Primary test: overall pass@1** (what `worktrial power` plans for). Every other row is secondary: its "
        "CI and p are for that row alone; its Holm p adjusts all secondary rows of this pair together, so use "
        "that one when claiming any of them.",
    ]
    notes = sorted({d.ci_note for d in (o.pass_at_1, o.pass_at_k, o.pass_power_k) if d.ci_note})
    lines += [
        f"- {for_markdown(n)}" + ("; the exact test's p-value still holds" if n.startswith("no interval") else "")
        for n in notes
    ]
    errors = [d.monte_carlo_error for d in (o.pass_at_1, o.pass_at_k, o.pass_power_k) if d.monte_carlo_error]
    if errors:
        lines.append(f"\n- Monte Carlo p-values (fixed seed) carry a standard error of at most {max(errors):.4f}")
    units = f"{o.tasks} tasks" + (f" in {o.pass_at_1.clusters} clusters" if o.pass_at_1.clusters is not None else "")
    if mde1 is not None:
        why = ""
    elif min(o.tasks, o.pass_at_1.clusters or o.tasks) < fewest_tasks():
        why = f" (no difference is: the exact test needs at least {fewest_tasks()} tasks, or clusters, to reject)"
    else:
        why = " (needs differences that vary between tasks to estimate their variance)"
    lines += [
        "",
        f"**Power of this design:** with {units}, a *true* difference of {num(mde1)} in pass@1 "
        f"({num(mdek)} in pass@{k}) would be detected 80% of the time at α = 0.05"
        + why
        + ". This describes the design, not the observed result: smaller true differences are often missed, so a "
        "non-significant result here does not show the runs are equal. `worktrial power` plans a bigger run.",
        "",
    ]
    if pair.flips:
        lines += [
            "### Tasks that flip",
            "",
            "| task | category | solved by | A passed | B passed |",
            "|---|---|---|---:|---:|",
        ]
        lines += [
            f"| {for_markdown(f.task_id)} | {for_markdown(f.category)} | {f.solved_by.upper()} only "
            f"| {f.a_passed}/{f.a_total} | {f.b_passed}/{f.b_total} |"
            for f in pair.flips
        ]
    else:
        lines.append("No task is solved by one run and never by the other.")
    ea, eb, d = pair.efficiency_a, pair.efficiency_b, pair.efficiency_difference
    lines += [
        "",
        "### Cost and tokens",
        "",
        "| figure | A | B | B − A |",
        "|---|---:|---:|---:|",
        f"| cost | {_money(ea.cost_usd)} | {_money(eb.cost_usd)} | {_money(d['cost_usd'], signed=True)} |",
        f"| cost per solve | {_per_solve(ea)} | {_per_solve(eb)} | {_money(d['cost_per_solve'], signed=True)} |",
        f"| mean cost per attempt | {_money(ea.mean_cost_per_attempt)} | {_money(eb.mean_cost_per_attempt)} "
        f"| {_money(d['mean_cost_per_attempt'], signed=True)} |",
        f"| tokens per attempt | {_plain(ea.mean_tokens_per_attempt, digits=0)} "
        f"| {_plain(eb.mean_tokens_per_attempt, digits=0)} | {_plain(d['mean_tokens_per_attempt'], True, 0)} |",
        f"| turns per attempt | {_plain(ea.mean_turns_per_attempt)} | {_plain(eb.mean_turns_per_attempt)} "
        f"| {_plain(d['mean_turns_per_attempt'], True)} |",
    ]
    if ea.unpriced_runs or eb.unpriced_runs:
        lines.append(
            f"\nUnpriced attempts: A {ea.unpriced_runs}, B {eb.unpriced_runs}; unknown cost is never treated as free."
        )
    return lines


def render_comparison_markdown(comparison: Comparison) -> str:
    header = "| run | agent | model | run id | suite · bundle sha256 | tasks | attempts | k |"
    lines = ["# worktrial compare", "", header]
    lines.append("|---|---|---|---|---|---:|---:|---:|")
    for r in comparison.runs:
        lines.append(
            f"| {markdown_code(r.label, table=True)} | {for_markdown(r.agent)} | {for_markdown(r.model or '—')} "
            f"| {markdown_code(r.run_id, table=True)} | {markdown_code(r.suite_id, table=True)} "
            f"{markdown_code(r.suite_sha256[:12], table=True)} | {r.tasks} | {r.attempts} | {r.k} |"
        )
    lines += [
        "",
        "Differences are per-task paired differences (B − A), averaged over tasks; standard errors are across "
        "tasks (cluster-robust CR2 when tasks name a cluster; Miller 2024). p-values are two-sided and exact: McNemar "
        "when each task is one pass/fail per run, otherwise a sign-flip permutation test over tasks (clusters), "
        "enumerated exactly or, for large suites without a common lattice, Monte Carlo with a fixed seed. Each 95% CI "
        "is tied to that same test (its end nearest 0 is the test's own inversion), so it excludes 0 exactly when "
        "p < 0.05. See docs/statistics.md.",
    ]
    if not comparison.same_suite:
        lines += ["", "**The runs used different suite files; only shared task ids are compared.**"]
    for pair in comparison.pairs:
        lines += ["", *_pair_section(pair)]
    return "\n".join(lines) + "\n"
