"""Markdown for a model or agent matrix: one leaderboard table, then what did not finish and how to follow up."""

from __future__ import annotations

from worktrial.analysis.leaderboard import Leaderboard, LeaderboardRow
from worktrial.render.format import ci, num, p_value, plain, rate, usd
from worktrial.safe_text import for_markdown, markdown_code


def _per_solve(row: LeaderboardRow) -> str:
    """Fully priced but never solved is a fact ("no solves"), not an unknown cost."""
    if row.cost_per_solve is None and row.unpriced_runs == 0 and row.cost_usd is not None:
        return "no solves"
    return usd(row.cost_per_solve)


def _under(row: LeaderboardRow) -> str:
    if row.under_claim_rate is not None:
        return rate(row.under_claim_rate, row.under_claims, row.verified_non_claims)
    return "—" if row.verify_always else "not measured"


def _versus(row: LeaderboardRow) -> tuple[str, str]:
    if row.rank == 1:
        return "(best)", "—"
    if row.vs_best is None:
        return "—", "—"
    return num(row.vs_best.difference, signed=True), p_value(row.vs_best.p_value)


def _rank(row: LeaderboardRow) -> str:
    """``2=`` when another row has the same rank: equal on every sort key, so neither is ahead."""
    return f"{row.rank}=" if row.rank_shared else str(row.rank)


def _ranked_line(row: LeaderboardRow) -> str:
    tie = f"≈ #{row.tied_with}" if row.tied_with is not None else ""
    diff, p = _versus(row)
    cells = [
        _rank(row),
        tie,
        markdown_code(row.agent, table=True),
        markdown_code(row.model, table=True) if row.model else "—",
        f"{row.passed_runs}/{row.total_runs}",
        num(row.pass_at_k),
        ci(row.pass_at_k_ci95),
        num(row.pass_power_k),
        ci(row.pass_power_k_ci95),
        diff,
        p,
        _per_solve(row),
        plain(row.mean_tokens_per_attempt, 0),
        plain(row.mean_turns_per_attempt, 1),
        rate(row.over_claim_rate, row.over_claims, row.claimed_success),
        _under(row),
        markdown_code(row.run_id, table=True) if row.run_id else "—",
    ]
    return "| " + " | ".join(cells) + " |"


def _compact_line(row: LeaderboardRow) -> str:
    """The default row: what decides the ranking, in under 100 characters for usual labels."""
    tie = f" ≈{row.tied_with}" if row.tied_with is not None else ""
    diff, p = _versus(row)
    versus = diff if p == "—" else f"{diff} (p {p})"
    cells = [
        f"{_rank(row)}{tie}",
        markdown_code(row.label, table=True),
        f"{row.passed_runs}/{row.total_runs}",
        f"{num(row.pass_at_k)} {ci(row.pass_at_k_ci95)}",
        num(row.pass_power_k),
        versus,
        _per_solve(row),
    ]
    return "| " + " | ".join(cells) + " |"


def _unranked_line(row: LeaderboardRow) -> str:
    what = f"**{row.status}**"
    if row.broken:
        what = f"**broken** — {for_markdown(row.broken)}; not ranked, since 0% would measure the setup, not the agent"
    if row.error and row.error != row.broken:
        what += f" — {for_markdown(row.error)}"
    if row.run_id and row.status == "interrupted":
        what += f" (continue with {markdown_code(f'worktrial resume {row.run_id}')})"
    elif row.run_id:
        what += f" (partial run {markdown_code(row.run_id)})"
    return f"- {markdown_code(row.label)}: {what}"


def render_leaderboard_markdown(board: Leaderboard, wide: bool = False) -> str:
    """The leaderboard; ``wide`` adds CIs of pass^k, tokens, turns, honesty and run ids as columns."""
    """The leaderboard as markdown; pure, so the same text can be printed, written to a file or tested."""
    k = board.k if board.k is not None else "k"
    title = (
        f"{for_markdown(board.suite_name or '')} ({markdown_code(board.suite_id)})"
        if board.suite_id
        else "no finished runs"
    )
    lines = [f"# worktrial leaderboard: {title}", ""]
    facts = [f"configurations: {len(board.rows)}"]
    if board.attempts is not None:
        facts.append(f"attempts per task: {board.attempts} · every row at k = {k}")
    if board.clusters is not None:
        facts.append(f"tests over {board.clusters} task clusters")
    if board.base_commit:
        facts.append(f"base commit {markdown_code(board.base_commit[:12])}")
    if board.suite_sha256:
        facts.append(f"suite bundle sha256 {markdown_code(board.suite_sha256[:16] + '…')}")
    lines.append("- " + " · ".join(facts))
    lines += [f"- note: {for_markdown(note)}" for note in board.notes]
    ranked = [r for r in board.rows if r.rank is not None]
    if ranked:
        tie_note = "`≈ #1`" if wide else "`N ≈1`"
        lines += [
            "",
            f"Every row at k = {k} (the smallest attempt count among the ranked runs); sorted by pass@{k}, then "
            f"pass^{k}, then cost per solve; `2=` marks rows equal on all three (a tie, listed by name). `vs #1` is "
            f"the paired per-task difference in pass@{k} from the top row (exact test, as in `worktrial compare`); "
            f"its p-value is Holm-corrected over all rows. {tie_note}: that corrected p is at least 0.05, so the "
            "data do not establish that this row is behind the top one.",
            "",
        ]
        if wide:
            lines += [
                f"| # | tie | agent | model | passed/total | pass@{k} | 95% CI | pass^{k} | 95% CI | vs #1 | p "
                "| cost/solve | tokens/attempt | turns/attempt | over-claim | under-claim | run |",
                "|---:|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---|---|---|",
            ]
            lines += [_ranked_line(r) for r in ranked]
        else:
            lines += [
                f"| # | configuration | passed | pass@{k} [95% CI] | pass^{k} | vs #1 | cost/solve |",
                "|---|---|---:|---|---:|---|---:|",
            ]
            lines += [_compact_line(r) for r in ranked]
            lines += ["", "Runs: " + " · ".join(f"#{_rank(r)} {markdown_code(r.run_id)}" for r in ranked if r.run_id)]
            lines.append("(`--wide` adds pass^k CIs, tokens, turns and claim honesty.)")
    unranked = [r for r in board.rows if r.rank is None]
    if unranked:
        lines += ["", "## Not ranked", ""] + [_unranked_line(r) for r in unranked]
    run_ids = [r.run_id for r in ranked if r.run_id]
    lines.append("")
    if len(run_ids) >= 2:
        lines.append(
            "Each configuration is a stored run: `worktrial report RUN_ID` shows its full report, "
            f"{markdown_code(f'worktrial compare {run_ids[0]} {run_ids[1]}')} compares two task by task."
        )
    elif run_ids:
        report = markdown_code(f"worktrial report {run_ids[0]}")
        lines.append(f"Each configuration is a stored run: {report} shows its full report.")
    return "\n".join(lines) + "\n"
