"""The report folder of a chaos run, and its one-screen summary.

    history.jsonl   the History (History.load reads it back; check() judges it again)
    verdict.json    ok, anomalies, counts, problems, seed, scenario, schedule, the windows as
                    applied (ms since the history began), client errors seen
    timeline.png    latency of each send (top) and throughput of acknowledgements and polled
                    records (bottom) over time, each fault's window shaded, as Jepsen draws it
    report.html     the verdict and the picture on one page

The picture needs matplotlib (the `chaos` extra: pip install 'epochlog[chaos]'); without it the
report is written without the picture and its page says how to get one. matplotlib is used with
its Agg backend, so no display is needed.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgspec

from ..history import Fault, Poll, Send
from .runner import Outcome

BUCKET_MS = 500.0  # throughput is counted per bucket of this width
INSTALL_HINT = "pip install 'epochlog[chaos]'  (or: pip install matplotlib)"
ERRORS_SHOWN = 20


def verdict_document(outcome: Outcome) -> dict[str, Any]:
    c = outcome.config
    return {
        "ok": outcome.ok,
        "scenario": c.scenario.name, "summary": c.scenario.summary, "seed": c.seed,
        "duration_s": c.duration_s, "client": c.client, "target": c.target,
        "loss_expected": c.scenario.loss_expected,
        "schedule": [{**asdict(w), "describe": w.describe()} for w in outcome.schedule],
        "applied": [{"window": a.window.describe(), "start_ms": round(a.start_ms, 1),
                     "end_ms": None if a.end_ms is None else round(a.end_ms, 1),
                     "victims": a.victims} for a in outcome.applied],
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

    ops = outcome.history.ops
    sends = [op for op in ops if isinstance(op, Send) and op.t_ms is not None]
    ok = [(op.t_ms / 1000, op.t_ms - op.start_ms) for op in sends
          if op.acked and op.t_ms is not None]
    failed = [(op.t_ms / 1000, op.t_ms - op.start_ms) for op in sends
              if not op.acked and op.t_ms is not None]
    end_ms = max([op.t_ms for op in ops if op.t_ms is not None] + [1.0])
    buckets = int(end_ms // BUCKET_MS) + 1
    acks, polled = [0] * buckets, [0] * buckets
    for send in sends:
        if send.acked and send.t_ms is not None:
            acks[int(send.t_ms // BUCKET_MS)] += 1
    for poll in ops:
        if isinstance(poll, Poll) and poll.t_ms is not None and poll.client != "read-back":
            polled[int(poll.t_ms // BUCKET_MS)] += len(poll.records)
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
    bottom.set_xlabel("seconds since the history began")
    for a in outcome.applied:
        stop = (a.end_ms if a.end_ms is not None else end_ms) / 1000
        for ax in (top, bottom):
            ax.axvspan(a.start_ms / 1000, stop, color="#ff7f0e", alpha=0.18, lw=0)
        top.text(a.start_ms / 1000, 1.01, f"{a.window.kind} {','.join(map(str, a.victims))}",
                 transform=top.get_xaxis_transform(), fontsize=7, va="bottom")
    for fault in ops:
        if isinstance(fault, Fault) and fault.t_ms is not None:
            bottom.axvline(fault.t_ms / 1000, color="#7f7f7f", lw=0.5, ls=":")
    c = outcome.config
    verdict = "ok" if outcome.ok else "FAILED"
    fig.suptitle(f"{c.scenario.name}, seed {c.seed}, client {c.client}: {verdict}", y=0.995)
    top.legend(loc="upper right", fontsize=7)
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
               '<img src="timeline.png" alt="throughput and latency over time, faults shaded">')
    windows = "".join(f"<li>{html.escape(a.window.describe())} (victims "
                      f"{html.escape(', '.join(map(str, a.victims)) or '-')})</li>"
                      for a in outcome.applied)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>epochlog chaos: {html.escape(c.scenario.name)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
pre{{background:#f4f4f4;padding:1em;overflow:auto}}</style></head><body>
<h1>{html.escape(c.scenario.name)}, seed {c.seed}: {'ok' if outcome.ok else 'FAILED'}</h1>
<p>{html.escape(c.scenario.summary)}. Client {html.escape(c.client)}, target
{html.escape(c.target)}, {c.duration_s:g}s under faults.</p>
{picture}
<h2>Faults</h2><ul>{windows}</ul>
<h2>Verdict</h2><pre>{html.escape(summary(outcome))}</pre>
<p>Files: <a href="history.jsonl">history.jsonl</a>, <a href="verdict.json">verdict.json</a>.</p>
</body></html>
"""
