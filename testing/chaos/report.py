"""The report folder of a chaos run, and its one-screen summary.

    history.jsonl   the History (History.load reads it back; check() judges it again)
    verdict.json    ok, anomalies, counts, problems, seed, scenario, schedule, the windows as
                    applied, client errors seen
    timeline.png    latency of each send (top) and throughput of acknowledgements and polled
                    records (bottom) over time, each fault shaded from its injection to its heal
                    and its recovery (heal to rejoin) in a lighter shade, as Jepsen draws it
    report.html     the verdict and the picture on one page

Every part counts time from one origin, the workload's start (as the schedule does), and says
so: the fault list, the picture's axis, the console summary, verdict.json (which also gives the
origin on history.jsonl's clock, `workload_start_ms`). `windows()` is the one place that turns
the run's clock into report time.

The picture needs matplotlib (the `chaos` extra: pip install 'epochlog[chaos]'); without it the
report is written without the picture and its page says how to get one. matplotlib is used with
its Agg backend, so no display is needed.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..history import Fault, Poll, Send
from .runner import Outcome

BUCKET_MS = 500.0  # throughput is counted per bucket of this width
INSTALL_HINT = "pip install 'epochlog[chaos]'  (or: pip install matplotlib)"
ERRORS_SHOWN = 20
TIME_AXIS = "seconds since the workload started"  # the origin of every time in the report
FAULT_COLOR, RECOVERY_COLOR = "#ff7f0e", "#9467bd"


@dataclass(frozen=True)
class Shown:
    """One applied window in report time (seconds since the workload started): the fault from
    start_s to heal_s, the recovery from heal_s to end_s."""

    label: str  # the fault kind and its victims: "kill 3"
    planned: str  # the schedule's window, described
    start_s: float
    heal_s: float  # the fault undone (end_s when it could not be)
    end_s: float  # recovered: the restart, resume or heal returned


def windows(outcome: Outcome) -> list[Shown]:
    """The applied windows as every part of the report shows them."""
    last_ms = max([op.t_ms for op in outcome.history.ops if op.t_ms is not None] + [0.0])

    def s(ms: float) -> float:
        return round((ms - outcome.origin_ms) / 1000, 3)

    shown = []
    for a in outcome.applied:
        end_ms = a.end_ms if a.end_ms is not None else max(last_ms, a.start_ms)
        heal_ms = a.heal_ms if a.heal_ms is not None else end_ms
        shown.append(Shown(label=f"{a.window.kind} {','.join(map(str, a.victims))}".strip(),
                           planned=a.window.describe(), start_s=s(a.start_ms),
                           heal_s=s(heal_ms), end_s=s(end_ms)))
    return shown


def shaded(outcome: Outcome) -> list[tuple[str, float, float]]:
    """The picture's shaded spans, ("fault" | "recovery", from_s, to_s): two per window, so
    windows that follow one another closely still show where each fault began and ended."""
    spans = []
    for w in windows(outcome):
        spans.append(("fault", w.start_s, w.heal_s))
        if w.end_s > w.heal_s:
            spans.append(("recovery", w.heal_s, w.end_s))
    return spans


def _describe(w: Shown) -> str:
    return (f"{w.start_s:.1f}-{w.heal_s:.1f}s {w.label}, recovered at {w.end_s:.1f}s "
            f"(planned: {w.planned})")


def verdict_document(outcome: Outcome) -> dict[str, Any]:
    c = outcome.config
    return {
        "ok": outcome.ok,
        "scenario": c.scenario.name, "summary": c.scenario.summary, "seed": c.seed,
        "duration_s": c.duration_s, "client": c.client, "target": c.target,
        "loss_expected": c.scenario.loss_expected,
        "times": TIME_AXIS,
        "workload_start_ms": round(outcome.origin_ms, 1),  # on history.jsonl's clock
        "schedule": [{**asdict(w), "describe": w.describe()} for w in outcome.schedule],
        "applied": [{"window": w.planned, "fault": w.label, "start_s": w.start_s,
                     "heal_s": w.heal_s, "recovered_s": w.end_s, "victims": a.victims}
                    for w, a in zip(windows(outcome), outcome.applied, strict=True)],
        "problems": outcome.problems,
        "verdict": msgspec.to_builtins(outcome.verdict),
        "final_log_values": outcome.final_values,
        "acknowledged_values_lost": outcome.lost_acked,
        "client_errors": {"count": outcome.error_count, "first": outcome.errors[:ERRORS_SHOWN]},
        "elapsed_s": round(outcome.elapsed_s, 1),
    }


def write(outcome: Outcome, folder: Path) -> Path:
    """Write the report folder (made if missing); the path of report.html."""
    folder.mkdir(parents=True, exist_ok=True)
    outcome.history.save(folder / "history.jsonl")
    (folder / "verdict.json").write_text(json.dumps(verdict_document(outcome), indent=2) + "\n")
    picture = timeline(outcome, folder / "timeline.png")
    page = folder / "report.html"
    page.write_text(_html(outcome, picture))
    return page


def timeline(outcome: Outcome, path: Path) -> str | None:
    """Draw timeline.png; None when it was drawn, else why not (matplotlib missing)."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        return f"matplotlib is not installed, so there is no timeline picture: {INSTALL_HINT}"
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.patches import Patch

    ops = outcome.history.ops

    def s(t_ms: float) -> float:  # report time
        return (t_ms - outcome.origin_ms) / 1000

    sends = [op for op in ops if isinstance(op, Send) and op.t_ms is not None]
    ok = [(s(op.t_ms), op.t_ms - op.start_ms) for op in sends
          if op.acked and op.t_ms is not None]
    failed = [(s(op.t_ms), op.t_ms - op.start_ms) for op in sends
              if not op.acked and op.t_ms is not None]
    end_s = max([s(op.t_ms) for op in ops if op.t_ms is not None] + [0.001])
    buckets = int(end_s * 1000 // BUCKET_MS) + 1
    acks, polled = [0] * buckets, [0] * buckets

    def bucket(t_ms: float) -> int:  # what came before the workload counts in the first
        return max(int(s(t_ms) * 1000 // BUCKET_MS), 0)

    for send in sends:
        if send.acked and send.t_ms is not None:
            acks[bucket(send.t_ms)] += 1
    for poll in ops:
        if isinstance(poll, Poll) and poll.t_ms is not None and poll.client != "read-back":
            polled[bucket(poll.t_ms)] += len(poll.records)
    xs = [(i + 0.5) * BUCKET_MS / 1000 for i in range(buckets)]
    per_s = 1000 / BUCKET_MS

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    if ok:
        top.scatter(*zip(*ok, strict=True), s=3, color="#1f77b4", label="acknowledged")
    if failed:
        top.scatter(*zip(*failed, strict=True), s=6, color="#d62728", marker="x",
                    label="failed")
    top.set_yscale("log")
    top.set_ylabel("send latency (ms)")
    bottom.plot(xs, [n * per_s for n in acks], color="#1f77b4", label="acknowledged / s")
    bottom.plot(xs, [n * per_s for n in polled], color="#2ca02c", label="polled / s")
    bottom.set_ylabel("records / s")
    bottom.set_xlabel(TIME_AXIS)
    for kind, start, stop in shaded(outcome):
        color, alpha = (FAULT_COLOR, 0.3) if kind == "fault" else (RECOVERY_COLOR, 0.2)
        for ax in (top, bottom):
            ax.axvspan(start, stop, color=color, alpha=alpha, lw=0)
    for w in windows(outcome):
        top.text(w.start_s, 1.01, w.label, transform=top.get_xaxis_transform(), fontsize=7,
                 va="bottom")
    for fault in ops:
        if isinstance(fault, Fault) and fault.t_ms is not None:
            bottom.axvline(s(fault.t_ms), color="#7f7f7f", lw=0.5, ls=":")
    handles, _ = top.get_legend_handles_labels()
    if outcome.applied:
        handles += [Patch(color=FAULT_COLOR, alpha=0.3, label="fault (injected to healed)"),
                    Patch(color=RECOVERY_COLOR, alpha=0.2,
                          label="recovery (healed to rejoined)")]
    c = outcome.config
    verdict = "ok" if outcome.ok else "FAILED"
    fig.suptitle(f"{c.scenario.name}, seed {c.seed}, client {c.client}: {verdict}", y=0.995)
    top.legend(handles=handles, loc="upper right", fontsize=7)
    bottom.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return None


def summary(outcome: Outcome) -> str:
    c = outcome.config
    lines = [f"{c.scenario.name} seed {c.seed} ({c.client}, {c.target}): "
             f"{'ok' if outcome.ok else 'FAILED'}",
             f"  {len(outcome.applied)} fault window(s); {outcome.final_values} values in the "
             f"final log; {outcome.error_count} client errors seen (expected under faults)",
             *([f"  faults ({TIME_AXIS}):"] if outcome.applied else []),
             *[f"    {_describe(w)}" for w in windows(outcome)],
             f"  stats: {outcome.verdict.stats}"]
    if c.scenario.loss_expected:
        lines.append(f"  loss expected ({c.scenario.loss_expected}): "
                     f"{outcome.lost_acked} acknowledged value(s) lost, as expected")
    lines += ["  " + line for line in str(outcome.verdict).splitlines()]
    lines += [f"  problem: {p}" for p in outcome.problems]
    return "\n".join(lines)


def _html(outcome: Outcome, no_picture: str | None) -> str:
    c = outcome.config
    picture = (f"<p><em>{html.escape(no_picture)}</em></p>" if no_picture else
               '<img src="timeline.png" alt="throughput and latency over time (seconds since '
               'the workload started), each fault shaded apart from its recovery">')
    faults = "".join(f"<li>{html.escape(_describe(w))}</li>" for w in windows(outcome))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>epochlog chaos: {html.escape(c.scenario.name)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
pre{{background:#f4f4f4;padding:1em;overflow:auto}}</style></head><body>
<h1>{html.escape(c.scenario.name)}, seed {c.seed}: {'ok' if outcome.ok else 'FAILED'}</h1>
<p>{html.escape(c.scenario.summary)}. Client {html.escape(c.client)}, target
{html.escape(c.target)}, {c.duration_s:g}s under faults.</p>
{picture}
<h2>Faults ({TIME_AXIS})</h2><ul>{faults}</ul>
<h2>Verdict</h2><pre>{html.escape(summary(outcome))}</pre>
<p>Files: <a href="history.jsonl">history.jsonl</a>, <a href="verdict.json">verdict.json</a>.</p>
</body></html>
"""
