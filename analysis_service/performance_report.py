"""The HTML report's section for a performance-testing campaign (the generator's `trace_performance` strategy):
R_a against R_t, simple and robust, as "Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022),
Section 6 compares them. Robust testing draws the curves over the prefix length pl; simple testing is one pair."""

from __future__ import annotations

from collections.abc import Sequence

from analysis_service.html_kit import escape, figure_png_base64, img_tag, new_figure, plot_label
from analysis_service.metrics import ExecutionRecord
from analysis_service.performance_testing import PerformanceMeasurement, measure_performance


def performance_section(title: str, records: Sequence[ExecutionRecord]) -> str:
    """HTML for the campaign's performance measurement; empty for a campaign that is no performance test."""
    measured = measure_performance((r.trace_labels, r.total_reward) for r in records if r.trace_labels)
    if not measured.agent and not measured.traces:
        return ""
    parts = ["<h3>Performance testing</h3>"]
    if 0 in measured.agent or 0 in measured.traces:
        parts.append(
            "<p>Simple (from s0): the agent's mean reward R_a = "
            f"{_reward(measured.agent.get(0))}, the fittest fuzz traces' R_t = {_reward(measured.traces.get(0))}. "
            "R_a below R_t: the traces found a better behaviour than the agent's.</p>"
        )
    lengths = measured.robust_lengths()
    if lengths:
        below = sum(1 for pl in lengths if measured.agent[pl] < measured.traces[pl])
        parts.append(
            f"<p>Robust: at {below} of {len(lengths)} prefix lengths the agent, taking over at s_pl, earns less "
            "than the rest of the trace (R_a^pl &lt; R_t^pl; both include the prefix's reward).</p>"
        )
        parts.append(img_tag(_plot_robust(title, measured, lengths), f"robust performance, {title}"))
        rows = "".join(
            f"<tr><td>{pl}</td><td>{measured.agent[pl]:.2f}</td><td>{measured.traces[pl]:.2f}</td>"
            f"<td>{measured.agent[pl] - measured.traces[pl]:+.2f}</td></tr>"
            for pl in lengths
        )
        head = "<tr><th>pl</th><th>R_a^pl</th><th>R_t^pl</th><th>R_a^pl − R_t^pl</th></tr>"
        parts.append(f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>")
    return "".join(parts)


def _reward(value: float | None) -> str:
    return "—" if value is None else escape(f"{value:.2f}")


def _plot_robust(title: str, measured: PerformanceMeasurement, lengths: list[int]) -> str:
    fig = new_figure()
    ax = fig.add_subplot()
    ax.plot(lengths, [measured.agent[pl] for pl in lengths], marker="o", label="R_a^pl (agent takes over)")
    ax.plot(lengths, [measured.traces[pl] for pl in lengths], marker="s", label="R_t^pl (fuzz trace)")
    ax.set_xlabel("prefix length pl")
    ax.set_ylabel("mean reward")
    ax.set_title(plot_label(f"Robust performance: {title}"))
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_png_base64(fig)
